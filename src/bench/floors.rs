//! The floors `ladder bench` measures a workload against, in the same run: on the CPU a copy
//! of the workload's bytes and the `gemm` crate's sgemm rate, with the machine's FMA peak
//! beside it; on a Vulkan device (`--backend vulkan`) the device's own copy bandwidth and f32
//! FMA rate ([`crate::backend::vulkan::floors`]).

use std::hint::black_box;

use super::{time, BenchError, FloorKind, Workload};

/// Floors measured once per thread count (the Vulkan device's once) and reused across
/// workloads.
#[derive(Default)]
pub struct Floors {
    gemm: Vec<(usize, f64)>,
    fma: Vec<(usize, f64)>,
    device: Option<DeviceFloors>,
}

/// The floors of the Vulkan device plans run on, measured once per run of `ladder bench`
/// (see [`crate::backend::vulkan::floors`]).
#[derive(Clone, Debug)]
pub struct DeviceFloors {
    /// The device's name.
    pub device: String,
    /// Bytes read plus bytes written per second by `vkCmdCopyBuffer`.
    pub copy_bytes_per_s: f64,
    /// The size of the buffer copied.
    pub copy_bytes: usize,
    /// f32 FLOPs per second (2 per FMA) of independent FMA chains.
    pub fma_flops_per_s: f64,
    /// Invocations of the FMA floor's dispatch.
    pub fma_invocations: u64,
    /// Independent FMA chains in each invocation.
    pub fma_chains: usize,
    /// How both were timed (timestamp queries, or host time around submit and wait).
    pub clock: &'static str,
    /// Timed submissions per floor (their median is taken).
    pub runs: usize,
}

/// Bytes of each buffer of the device's copy floor.
pub const DEVICE_COPY_BYTES: usize = 64 << 20;

impl Floors {
    /// The floor of `w` at `threads`, in microseconds. Call on the pool the workload runs on.
    pub fn floor_us(&mut self, w: &Workload, threads: usize) -> f64 {
        let copy = || copy_floor_us(w.io_bytes.saturating_sub(w.out_bytes), w.out_bytes, threads);
        let gemm = |s: &mut Floors| w.flops / (s.gemm_gflops(threads) * 1e3);
        match w.floor {
            FloorKind::Copy => copy(),
            FloorKind::Gemm => gemm(self),
            FloorKind::Max => copy().max(if w.flops > 0.0 { gemm(self) } else { 0.0 }),
        }
    }

    /// The GEMM throughputs measured so far: (threads, GFLOP/s).
    pub fn gemm_measured(&self) -> &[(usize, f64)] {
        &self.gemm
    }

    /// The GEMM crate's 1024³ throughput at `threads` (measured on first use, with the
    /// machine's FMA peak at the same thread count beside it).
    pub fn gemm_gflops(&mut self, threads: usize) -> f64 {
        if let Some(&(_, g)) = self.gemm.iter().find(|(t, _)| *t == threads) {
            return g;
        }
        let g = gemm_peak_gflops(threads);
        self.gemm.push((threads, g));
        self.fma.push((threads, fma_peak_gflops(threads)));
        g
    }

    /// The FMA peaks measured so far (with each GEMM rate): (threads, GFLOP/s).
    pub fn fma_measured(&self) -> &[(usize, f64)] {
        &self.fma
    }

    /// The floor of `w` on the Vulkan device, in microseconds: its io bytes at the device's
    /// copy rate, or its FLOPs at the device's FMA rate ([`FloorKind::Max`]: the larger).
    pub fn device_floor_us(&mut self, w: &Workload) -> Result<f64, BenchError> {
        let f = self.device_floors()?;
        let copy = w.io_bytes as f64 / f.copy_bytes_per_s * 1e6;
        let fma = w.flops / f.fma_flops_per_s * 1e6;
        Ok(match w.floor {
            FloorKind::Copy => copy,
            FloorKind::Gemm => fma,
            FloorKind::Max => copy.max(if w.flops > 0.0 { fma } else { 0.0 }),
        })
    }

    /// The Vulkan device's floors, if measured.
    pub fn device_measured(&self) -> Option<&DeviceFloors> {
        self.device.as_ref()
    }

    /// The device's floors, measured on first use.
    pub fn device_floors(&mut self) -> Result<&DeviceFloors, BenchError> {
        let floors = match self.device.take() {
            Some(floors) => floors,
            None => measure_device()?,
        };
        Ok(self.device.insert(floors))
    }
}

/// The floors of ladder's own Vulkan device (the one `CompileOptions::vulkan` plans use).
#[cfg(feature = "vulkan")]
fn measure_device() -> Result<DeviceFloors, BenchError> {
    use crate::backend::vulkan::{floors, VulkanDevice};
    /// Timed submissions of each device floor.
    const DEVICE_RUNS: usize = 9;
    let floor = |e: crate::backend::vulkan::VulkanError| BenchError::Backend(format!("the device's floors: {e}"));
    let device = VulkanDevice::process().map_err(floor)?;
    let copy = floors::copy_rate(&device, DEVICE_COPY_BYTES, DEVICE_RUNS).map_err(floor)?;
    let fma = floors::fma_rate(&device, DEVICE_RUNS).map_err(floor)?;
    Ok(DeviceFloors {
        device: device.name().to_string(),
        copy_bytes_per_s: copy.per_second,
        copy_bytes: DEVICE_COPY_BYTES,
        fma_flops_per_s: fma.per_second,
        fma_invocations: floors::FMA_INVOCATIONS,
        fma_chains: floors::FMA_CHAINS,
        clock: if copy.clock == fma.clock { copy.clock.name() } else { "timestamp queries and host time" },
        runs: DEVICE_RUNS,
    })
}

#[cfg(not(feature = "vulkan"))]
fn measure_device() -> Result<DeviceFloors, BenchError> {
    Err(BenchError::Backend("this ladder was built without the `vulkan` feature".into()))
}

/// Reads `src` once and writes `dst` once (the copy floor's kernel).
fn copy_bytes(src: &[u8], dst: &mut [u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    if src.len() > n {
        // The rest of the input is read once (summed in 8 independent lanes, which
        // vectorizes: a byte-wise loop here made the floor slower than the work it bounds).
        let mut acc = [0u64; 8];
        let words = src[n..].chunks_exact(64);
        let rest = words.remainder();
        for c in words {
            for (a, w) in acc.iter_mut().zip(c.chunks_exact(8)) {
                *a = a.wrapping_add(u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]));
            }
        }
        let tail: u64 = rest.iter().map(|&b| b as u64).sum();
        black_box(acc.iter().fold(tail, |s, &a| s.wrapping_add(a)));
    } else {
        dst[n..].fill(0);
    }
    black_box(dst);
}

/// Microseconds to read `bytes_in` and write `bytes_out` with 1 thread, and with up to
/// `threads` (the faster), on the current rayon pool.
pub fn copy_floor_us(bytes_in: usize, bytes_out: usize, threads: usize) -> f64 {
    let src = vec![1u8; bytes_in];
    let mut dst = vec![0u8; bytes_out];
    let one = time(None, || {
        copy_bytes(&src, &mut dst);
        Ok::<(), std::convert::Infallible>(())
    })
    .map(|t| t.median_us)
    .unwrap_or(f64::NAN);
    if threads < 2 || bytes_in.max(bytes_out) < 64 * 1024 {
        return one;
    }
    let t = threads.min(rayon::current_num_threads().max(1));
    let (ci, co) = (bytes_in.div_ceil(t), bytes_out.div_ceil(t));
    let par = time(None, || {
        use rayon::prelude::*;
        let pieces: Vec<(&[u8], &mut [u8])> = src.chunks(ci.max(1)).zip(dst.chunks_mut(co.max(1))).collect();
        pieces.into_par_iter().for_each(|(s, d)| copy_bytes(s, d));
        Ok::<(), std::convert::Infallible>(())
    })
    .map(|t| t.median_us)
    .unwrap_or(f64::NAN);
    one.min(par)
}

/// The `gemm` crate's sgemm throughput at 1024³ on `threads` threads (GFLOP/s), called
/// directly, on the current rayon pool; on the x86-64 baseline level, where ladder's f32
/// products run its own kernel instead (`backend::cpu::packed`), that kernel's.
pub fn gemm_peak_gflops(threads: usize) -> f64 {
    let n = 1024;
    let a = vec![0.5f32; n * n];
    let b = vec![0.25f32; n * n];
    let mut c = vec![0.0f32; n * n];
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    let g = crate::backend::cpu::gemm::Gemm2d { m: n, n, k: n, a_rs: n, a_cs: 1, b_rs: n, b_cs: 1, ldc: n };
    let t = time(None, || {
        // SAFETY: row-major [n, n] operands of exactly that length.
        if unsafe {
            crate::backend::cpu::packed::baseline_gemm(&g, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), 1.0, false, threads)
        } {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        };
        Ok::<(), std::convert::Infallible>(())
    });
    t.map(|t| 2.0 * (n * n * n) as f64 / (t.median_us * 1e3)).unwrap_or(f64::NAN)
}

/// The machine's f32 multiply-add peak on `threads` threads (GFLOP/s): independent chains of
/// the widest vector FMA the CPU has (AVX-512, else AVX2 with FMA; NEON's 128-bit one on
/// aarch64; else scalar `mul_add`), one
/// loop per thread on the current rayon pool. No GEMM can beat it; `ladder bench` prints it
/// next to the GEMM crate's rate so that matmul-bound targets can be read against it.
pub fn fma_peak_gflops(threads: usize) -> f64 {
    const ITERS: usize = 1 << 18;
    let t = threads.clamp(1, rayon::current_num_threads().max(1));
    let flops_per_thread = fma_chains(0).1 as f64 * ITERS as f64;
    let timing = time(None, || {
        use rayon::prelude::*;
        let sum: f32 = (0..t).into_par_iter().map(|_| fma_chains(ITERS).0).sum();
        black_box(sum);
        Ok::<(), std::convert::Infallible>(())
    });
    timing.map(|m| t as f64 * flops_per_thread / (m.median_us * 1e3)).unwrap_or(f64::NAN)
}

/// `iters` rounds of 12 independent FMA chains at the CPU's widest vector; returns a value
/// that depends on every lane and the FLOPs one round counts.
fn fma_chains(iters: usize) -> (f32, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(iters: usize) -> f32 {
            let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
            let mut acc = [_mm512_set1_ps(1.0); 12];
            for _ in 0..iters {
                for c in acc.iter_mut() {
                    *c = _mm512_fmadd_ps(*c, a, b);
                }
            }
            acc.iter().map(|&c| _mm512_reduce_add_ps(c)).sum()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(iters: usize) -> f32 {
            let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
            let mut acc = [_mm256_set1_ps(1.0); 12];
            for _ in 0..iters {
                for c in acc.iter_mut() {
                    *c = _mm256_fmadd_ps(*c, a, b);
                }
            }
            let mut lanes = [0f32; 8];
            let mut sum = 0.0;
            for c in acc {
                _mm256_storeu_ps(lanes.as_mut_ptr(), c);
                sum += lanes.iter().sum::<f32>();
            }
            sum
        }
        // The peak of the path ladder's kernels run (the ISA cap lowers it).
        if crate::backend::cpu::has_avx512() {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return (unsafe { avx512(iters) }, 12 * 16 * 2);
        }
        if crate::backend::cpu::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return (unsafe { avx2(iters) }, 12 * 8 * 2);
        }
        /// The baseline level has no fused multiply-add: a multiply and an add per step
        /// (`mul_add` there is a call to `fmaf`).
        #[target_feature(enable = "sse2")]
        unsafe fn sse(iters: usize) -> f32 {
            let (a, b) = (_mm_set1_ps(0.999_999), _mm_set1_ps(1e-7));
            let mut acc = [_mm_set1_ps(1.0); 12];
            for _ in 0..iters {
                for c in acc.iter_mut() {
                    *c = _mm_add_ps(_mm_mul_ps(*c, a), b);
                }
            }
            let mut lanes = [0f32; 4];
            let mut sum = 0.0;
            for c in acc {
                _mm_storeu_ps(lanes.as_mut_ptr(), c);
                sum += lanes.iter().sum::<f32>();
            }
            sum
        }
        if crate::backend::cpu::isa::active() > crate::backend::cpu::isa::Isa::Portable {
            // SAFETY: SSE2 is part of the x86-64 baseline.
            return (unsafe { sse(iters) }, 12 * 4 * 2);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::aarch64::*;
        #[target_feature(enable = "neon")]
        unsafe fn neon(iters: usize) -> f32 {
            let (a, b) = (vdupq_n_f32(0.999_999), vdupq_n_f32(1e-7));
            let mut acc = [vdupq_n_f32(1.0); 12];
            for _ in 0..iters {
                for c in acc.iter_mut() {
                    *c = vfmaq_f32(b, *c, a);
                }
            }
            acc.iter().map(|&c| vaddvq_f32(c)).sum()
        }
        if crate::backend::cpu::isa::active() > crate::backend::cpu::isa::Isa::Portable {
            // SAFETY: NEON is part of the aarch64 baseline (every aarch64 CPU has it).
            return (unsafe { neon(iters) }, 12 * 4 * 2);
        }
    }
    let mut acc = [1f32; 12];
    for _ in 0..iters {
        for c in acc.iter_mut() {
            *c = c.mul_add(0.999_999, 1e-7);
        }
    }
    (acc.iter().sum(), 12 * 2)
}
