//! The CPU backend. Library kernels: [`gemm`] (matmul), [`conv`], and the [`activation`]s their
//! epilogues apply.

pub mod activation;
pub mod conv;
pub mod gemm;
