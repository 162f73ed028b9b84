//! Native backends: each compiles a scheduled kernel program (`crate::kernel`) for one kind
//! of device.

pub mod cpu;
