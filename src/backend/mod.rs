//! Native backends: each compiles or runs a scheduled kernel program ([`crate::kernel`]) on one
//! kind of device. `cpu` compiles generated kernels with Cranelift and calls library kernels
//! (GEMM, convolution) for the opaque ops.

pub mod cpu;
