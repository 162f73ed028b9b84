//! Library shaders: compute shaders written by hand in WGSL (`shaders/*.wgsl` at the crate's
//! root), built into SPIR-V at build time by `build.rs` (naga; no system tool), for steps whose
//! generated kernels leave most of the device idle.
//!
//! - [`Gemm`] (`shaders/gemm_f32.wgsl`): an f32 `matmul` step (any transposes, broadcast
//!   batch dims, up to [`BATCH_DIMS`] of them, symbolic sizes) as a tiled product staging its
//!   operands' tiles in workgroup memory. Each result is summed over `k` in order with `fma`
//!   from +0: the reference's rounding where the device fuses it (the generated kernels round
//!   each product before adding it). A step's epilogue kernel runs after it as a generated kernel, as before.
//!
//! A library shader binds the step's buffers, then its parameters (u32 words the host
//! computes from the run's sizes when it records the run's commands) and the status word,
//! in the generated kernels' layout; an operand living in the run's arena is bound as the
//! arena, at its element offset there.

use crate::backend::Sizes;
use crate::ir::DType;
use crate::kernel::{BufferId, MatmulCall, Program};

mod words {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

/// Every library shader's SPIR-V by name: what tests validate with `spirv-val`.
pub fn library_shaders() -> Vec<(&'static str, &'static [u32])> {
    vec![("gemm_f32", words::GEMM_F32)]
}

/// Batch dims the GEMM shader's parameters hold.
pub const BATCH_DIMS: usize = 4;
/// The GEMM shader's tile of results per workgroup (rows, columns).
const TILE: (u64, u64) = (64, 64);
/// The values of `k` per tile.
const TILE_K: u64 = 16;

/// An f32 matmul step as the library GEMM.
#[derive(Clone, Debug)]
pub(super) struct Gemm {
    pub call: MatmulCall,
    pub name: String,
}

impl Gemm {
    /// The library GEMM for matmul `m` of `p` (named `name`), where the shader computes it:
    /// f32 operands and result, at most [`BATCH_DIMS`] batch dims, no fused activation.
    pub fn new(m: &MatmulCall, p: &Program, name: String) -> Option<Gemm> {
        let f32s = [m.a, m.b, m.out].iter().all(|&b| p.buffers[b].dtype == DType::F32);
        let ranks = [m.a, m.b, m.out].map(|b| p.buffers[b].shape.rank());
        let shaped = ranks.iter().all(|&r| r >= 2) && ranks[2] - 2 <= BATCH_DIMS;
        (f32s && shaped && m.activation.is_none()).then(|| Gemm { call: m.clone(), name })
    }

    /// The SPIR-V module.
    pub fn words(&self) -> &'static [u32] {
        words::GEMM_F32
    }

    /// The buffers bound at bindings 0, 1, 2: `a`, `b` and the result.
    pub fn buffers(&self) -> [BufferId; 3] {
        [self.call.a, self.call.b, self.call.out]
    }

    /// The shader's parameters for a run with `sizes` (layout: `shaders/gemm_f32.wgsl`), each
    /// operand's first element at `first` (0, or its element offset in the run's arena); why
    /// not, where an index the shader would form does not fit 32 bits.
    pub fn params(&self, p: &Program, sizes: &Sizes, first: [u64; 3]) -> Result<Vec<u32>, String> {
        let m = &self.call;
        let shape = |b: BufferId| sizes.shape(p, b).map_err(|e| e.to_string());
        let (a, b, out) = (shape(m.a)?, shape(m.b)?, shape(m.out)?);
        let u = |v: &[usize], i: usize| v[i] as u64;
        let nb = out.len() - 2;
        let (rows, cols) = (u(&out, nb), u(&out, nb + 1));
        let ra = a.len();
        let depth = if m.transpose_a { u(&a, ra - 2) } else { u(&a, ra - 1) };
        // Strides in elements: a's along rows and k, b's along k and columns.
        let (a_row, a_k) = if m.transpose_a { (1, rows) } else { (depth, 1) };
        let (b_k, b_col) = if m.transpose_b { (1, depth) } else { (cols, 1) };
        // Each operand's batch stride per output batch dim (0 where it broadcasts).
        let batch_strides = |dims: &[usize]| -> Vec<u64> {
            let lead = dims.len() - 2;
            let mut strides = vec![0u64; nb];
            let mut step = u(dims, lead) * u(dims, lead + 1);
            for d in (0..lead).rev() {
                let o = nb - lead + d;
                strides[o] = if dims[d] == 1 { 0 } else { step };
                step *= u(dims, d);
            }
            strides
        };
        let (sa, sb) = (batch_strides(&a), batch_strides(&b));
        let batch: u64 = out[..nb].iter().map(|&e| e as u64).product();
        let mut params =
            vec![rows, cols, depth, batch, a_row, a_k, b_k, b_col, first[0], first[1], first[2], nb as u64];
        for d in 0..nb {
            params.extend([u(&out, d), sa[d], sb[d]]);
        }
        // The last element each operand's indices reach (every index the shader forms is at
        // most that), checked to fit the shader's 32-bit arithmetic.
        let last = |first: u64, strides: &[u64], matrix: u64| -> u64 {
            let spread: u64 = out[..nb].iter().zip(strides).map(|(&e, &s)| (e as u64).saturating_sub(1) * s).sum();
            first + spread + matrix
        };
        let reach = [
            last(first[0], &sa, rows.saturating_sub(1) * a_row + depth.saturating_sub(1) * a_k),
            last(first[1], &sb, depth.saturating_sub(1) * b_k + cols.saturating_sub(1) * b_col),
            first[2] + batch * rows * cols,
            // The tiles' rows, columns and steps of k run past the result's sides by up to
            // a tile (loads and stores there are skipped, but the counters are formed).
            rows + TILE.0,
            cols + TILE.1,
            depth + TILE_K,
        ];
        if let Some(big) = reach.iter().chain(&params).find(|&&v| v > u64::from(u32::MAX)) {
            return Err(format!("an index of {big} (the library GEMM indexes with 32 bits)"));
        }
        Ok(params.into_iter().map(|v| v as u32).collect())
    }

    /// The workgroups to dispatch for `params` (workgroups loop over what one dispatch of at
    /// most `most` per dimension does not cover), or `None` where the result is empty.
    pub fn groups(params: &[u32], most: [u32; 3]) -> Option<[u32; 3]> {
        let (rows, cols, batch) = (u64::from(params[0]), u64::from(params[1]), u64::from(params[3]));
        let want = [cols.div_ceil(TILE.1), rows.div_ceil(TILE.0), batch];
        if want.contains(&0) {
            return None;
        }
        Some([0, 1, 2].map(|i| want[i].min(u64::from(most[i].min(65_535))) as u32))
    }
}
