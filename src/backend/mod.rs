//! Backends that run kernel programs ([`crate::kernel`]): `cpu` compiles each generated
//! kernel to native code with Cranelift.

pub mod cpu;
