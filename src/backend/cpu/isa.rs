//! The instruction sets the CPU backend may use, and the cap that limits them.
//!
//! Every kernel with a hand-written fast path has one per instruction set (AVX-512, AVX2,
//! and a portable one the compiler vectorizes for the baseline), picked at run time by what
//! the CPU has. The **cap**, like oneDNN's `ONEDNN_MAX_CPU_ISA`, lowers that choice so every
//! path can be tested and measured on one machine: `LADDER_MAX_ISA=avx2` runs the AVX2
//! variants on an AVX-512 machine. It applies to ladder's library kernels (the row kernels,
//! gelu, attention, direct convolution, the packed GEMM) and to the code Cranelift generates
//! (its target features are switched off down to the cap; at `portable` kernels are also
//! compiled without vectors). It does not reach the `gemm` crate, which picks its own
//! kernels by CPU detection: products that do not run ladder's packed GEMM use what the CPU
//! has (see [`gemm_crate_isa`]).
//!
//! The cap is read once, from the environment variable when it is set, else it is the
//! CPU's own level; [`set_max_isa`] overrides it for the process (before plans are compiled:
//! code Cranelift already generated keeps the features it was generated with).
//!
//! On aarch64 there are two levels. `neon` (the [`Isa::Baseline`] there, which every aarch64
//! CPU has) runs the portable library kernels, whose loops LLVM vectorizes with NEON when
//! ladder is compiled, and Cranelift kernels vectorized with its 128-bit F32X4 and fused
//! multiply-adds (part of the base instruction set there). `portable` changes only the
//! Cranelift kernels: scalar and without fused multiply-adds, as at `portable` on x86-64. The
//! x86 levels above are never detected there, so capping to them changes nothing.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust: no hand-written vector code; Cranelift kernels scalar.
    Portable,
    /// The target's baseline vectors: SSE2 to SSE4.1 on x86-64 (what Cranelift's F32X4 code
    /// needs), NEON on aarch64.
    Baseline,
    /// x86-64 AVX2 with FMA.
    Avx2,
    /// x86-64 AVX-512 (F, DQ, VL) with AVX2, FMA and POPCNT.
    Avx512,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Baseline => {
                if cfg!(target_arch = "aarch64") {
                    "neon"
                } else {
                    "sse4.1"
                }
            }
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a level name (`avx512`, `avx2`, `sse4.1` or `baseline`, `neon`, `portable`).
    pub fn from_name(s: &str) -> Option<Isa> {
        Some(match s.to_ascii_lowercase().as_str() {
            "avx512" | "avx512f" | "avx512_core" => Isa::Avx512,
            "avx2" => Isa::Avx2,
            "sse4.1" | "sse41" | "baseline" | "neon" => Isa::Baseline,
            "portable" | "none" | "scalar" => Isa::Portable,
            _ => return None,
        })
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> Option<Isa> {
        [Isa::Portable, Isa::Baseline, Isa::Avx2, Isa::Avx512].get(usize::from(c).checked_sub(1)?).copied()
    }
}

/// The environment variable that caps the level.
pub const ENV: &str = "LADDER_MAX_ISA";

/// What this CPU has.
pub fn detected() -> Isa {
    static DETECTED: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    let has = |f: &str| match f {
        "avx512f" => std::is_x86_feature_detected!("avx512f"),
        "avx512dq" => std::is_x86_feature_detected!("avx512dq"),
        "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
        "avx2" => std::is_x86_feature_detected!("avx2"),
        "fma" => std::is_x86_feature_detected!("fma"),
        "popcnt" => std::is_x86_feature_detected!("popcnt"),
        "sse4.1" => std::is_x86_feature_detected!("sse4.1"),
        _ => false,
    };
    if ["avx512f", "avx512dq", "avx512vl", "avx2", "fma", "popcnt"].iter().all(|f| has(f)) {
        Isa::Avx512
    } else if has("avx2") && has("fma") && has("popcnt") {
        Isa::Avx2
    } else if has("sse4.1") {
        Isa::Baseline
    } else {
        Isa::Portable
    }
}

#[cfg(target_arch = "aarch64")]
fn detect() -> Isa {
    Isa::Baseline
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> Isa {
    Isa::Portable
}

/// 0: not read yet; else `Isa::code` of the cap.
static CAP: AtomicU8 = AtomicU8::new(0);

/// The cap: [`set_max_isa`]'s, else [`ENV`]'s (an unknown name is ignored, with a warning on
/// stderr), else the CPU's level.
pub fn max_isa() -> Isa {
    if let Some(isa) = Isa::from_code(CAP.load(Ordering::Relaxed)) {
        return isa;
    }
    let isa = match std::env::var(ENV) {
        Ok(v) => Isa::from_name(v.trim()).unwrap_or_else(|| {
            eprintln!("warning: {ENV}={v} is not a level (avx512, avx2, sse4.1 or neon, portable); not capping");
            detected()
        }),
        Err(_) => detected(),
    };
    let _ = CAP.compare_exchange(0, isa.code(), Ordering::Relaxed, Ordering::Relaxed);
    Isa::from_code(CAP.load(Ordering::Relaxed)).unwrap_or(isa)
}

/// Caps the level for this process (see the module docs).
pub fn set_max_isa(isa: Isa) {
    CAP.store(isa.code(), Ordering::Relaxed);
}

/// The level ladder's own kernels run: the CPU's, capped.
pub fn active() -> Isa {
    detected().min(max_isa())
}

/// The level the `gemm` crate's kernels run (it detects the CPU itself; not capped).
pub fn gemm_crate_isa() -> Isa {
    detected()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_levels_order() {
        for isa in [Isa::Portable, Isa::Baseline, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
            assert_eq!(Isa::from_code(isa.code()), Some(isa));
        }
        assert_eq!(Isa::from_name("AVX2"), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("sse2"), None);
        assert!(Isa::Portable < Isa::Baseline && Isa::Baseline < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        assert!(active() <= detected());
    }
}
