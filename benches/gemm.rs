//! Throughput of the CPU library kernels (`backend::cpu::{gemm, conv}`), and the measurements
//! behind their design choices. Best of N runs (the machine is shared; these are A/B
//! comparisons); no statistics beyond that on purpose.
//!
//! `cargo bench --bench gemm` (`-- --runs N`, `-- --quick` for the sgemm rows only,
//! `-- --conv NAME` for the conv rows whose name contains NAME).
//!
//! - sgemm 1024³ through `matmul` against the `gemm` crate called directly, 1 and 2 threads;
//! - weights packed once (`backend::cpu::packed`) against the crate packing per call, on the
//!   products of W6 and W4;
//! - W4's two layers with the epilogue fused per tile against GEMM-then-a-pass;
//! - tiny products: the plain loop against the crate (the `SMALL_WORK` crossover);
//! - conv shapes: direct against im2col + GEMM (the `DIRECT_MAX_DEPTH` crossover).

use std::time::Instant;

use ladder::backend::cpu::activation::{apply_f32, Activation};
use ladder::backend::cpu::conv::{conv_with, ConvAlgo, ConvGeom};
use ladder::backend::cpu::gemm::{matmul, matmul_f32, Epilogue};
use ladder::backend::cpu::packed::PackedB;
use ladder::models::Rng;

/// The best (minimum) of `runs` timings after one warm-up: on a shared machine the minimum
/// is the steadiest estimate of what the code can do, and comparisons here are A/B.
fn best_s(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..runs.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn rand(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.uniform_bits(24) as f32).collect()
}

fn crate_sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: row-major a [m, k], b [k, n], c [m, n], all of those lengths.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
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
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(15usize);
    let quick = args.iter().any(|a| a == "--quick");
    let conv_only = args.iter().position(|a| a == "--conv").and_then(|i| args.get(i + 1)).cloned();
    let mut rng = Rng::new(0);

    if conv_only.is_none() {
        sections(runs, quick, &mut rng);
    }
    if quick {
        return;
    }
    conv_section(runs, conv_only.as_deref().unwrap_or(""), &mut rng);
}

fn sections(runs: usize, quick: bool, rng: &mut Rng) {
    let none: Epilogue<f32> = Epilogue::none();
    println!("sgemm 1024^3 (GFLOP/s, best of {runs}):");
    let n = 1024;
    let (a, b) = (rand(rng, n * n), rand(rng, n * n));
    let mut c = vec![0.0f32; n * n];
    let flops = 2.0 * (n * n * n) as f64;
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
        pool.install(|| {
            let ours = best_s(runs, || {
                matmul(&a, &[n, n], &b, &[n, n], false, false, &mut c, threads, &none).expect("matmul")
            });
            let direct = best_s(runs, || crate_sgemm(n, n, n, &a, &b, &mut c, threads));
            println!(
                "  threads {threads}: ladder matmul {:7.1}   gemm crate direct {:7.1}",
                flops / ours / 1e9,
                flops / direct / 1e9
            );
        });
    }
    if quick {
        return;
    }

    println!("weights packed once vs packed by the gemm crate per call (GFLOP/s, best of {runs}):");
    for (m, k, n) in
        [(128, 256, 768), (128, 256, 256), (128, 256, 1024), (128, 1024, 256), (256, 1024, 4096), (256, 4096, 1024)]
    {
        let (a, w) = (rand(rng, m * k), rand(rng, k * n));
        let mut c = vec![0.0f32; m * n];
        let Some(pb) = PackedB::new(&w, k, n, n, 1) else {
            println!("  (no AVX-512F here: nothing is packed)");
            break;
        };
        let fl = 2.0 * (m * n * k) as f64;
        let mut line = format!("  {m}x{k}x{n}:");
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
            pool.install(|| {
                let run = |packed: Option<&PackedB>, c: &mut [f32]| {
                    matmul_f32(&a, &[m, k], &w, &[k, n], false, false, c, threads, &none, packed).expect("matmul")
                };
                let packed = best_s(runs, || run(Some(&pb), &mut c));
                let crate_ = best_s(runs, || run(None, &mut c));
                line +=
                    &format!("  threads {threads}: packed {:6.1} crate {:6.1}", fl / packed / 1e9, fl / crate_ / 1e9);
            });
        }
        println!("{line}");
    }

    println!("W4 layers, epilogue fused per tile vs GEMM then one pass (us, best of {runs}):");
    let (m, d, f) = (256, 1024, 4096);
    let x = rand(rng, m * d);
    let w1: Vec<f32> = rand(rng, d * f).iter().map(|v| v / 32.0).collect();
    let w2: Vec<f32> = rand(rng, f * d).iter().map(|v| v / 64.0).collect();
    let mut h = vec![0.0f32; m * f];
    let mut y = vec![0.0f32; m * d];
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
        pool.install(|| {
            let gelu = Epilogue { activation: Activation::Gelu, ..Epilogue::none() };
            let fused1 =
                best_s(runs, || matmul(&x, &[m, d], &w1, &[d, f], false, false, &mut h, threads, &gelu).unwrap());
            let plain1 = best_s(runs, || {
                matmul(&x, &[m, d], &w1, &[d, f], false, false, &mut h, threads, &none).unwrap();
                apply_f32(&Activation::Gelu, &mut h);
            });
            let bare1 =
                best_s(runs, || matmul(&x, &[m, d], &w1, &[d, f], false, false, &mut h, threads, &none).unwrap());
            let res = Epilogue { residual: Some(&x), ..Epilogue::none() };
            let fused2 =
                best_s(runs, || matmul(&h, &[m, f], &w2, &[f, d], false, false, &mut y, threads, &res).unwrap());
            let plain2 = best_s(runs, || {
                matmul(&h, &[m, f], &w2, &[f, d], false, false, &mut y, threads, &none).unwrap();
                for (o, r) in y.iter_mut().zip(&x) {
                    *o += r;
                }
            });
            let fl = 2.0 * (m * d * f) as f64;
            println!(
                "  threads {threads}: x@W1 bare {:8.0} ({:5.1} GFLOP/s)  +gelu fused {:8.0}  +gelu pass {:8.0}",
                bare1 * 1e6,
                fl / bare1 / 1e9,
                fused1 * 1e6,
                plain1 * 1e6
            );
            println!(
                "             h@W2+x fused {:8.0} ({:5.1} GFLOP/s)  then-add {:8.0}",
                fused2 * 1e6,
                fl / fused2 / 1e9,
                plain2 * 1e6
            );
        });
    }
    let mut g = vec![0.0f32; 1 << 20];
    for (i, v) in g.iter_mut().enumerate() {
        *v = (i as f32 / (1 << 19) as f32 - 1.0) * 6.0;
    }
    for act in [Activation::Gelu, Activation::GeluTanh, Activation::Silu, Activation::Tanh] {
        let mut work = g.clone();
        let t = best_s(runs, || {
            work.copy_from_slice(&g);
            apply_f32(&act, &mut work)
        });
        println!("  activation {act:?} on 1M f32 (incl. a 4 MiB copy): {:.2} ns/element", t * 1e9 / g.len() as f64);
    }

    println!("tiny products, plain loop (via matmul) vs gemm crate (ns per call):");
    for s in [4usize, 8, 16, 20, 32] {
        let (a, b) = (rand(rng, s * s), rand(rng, s * s));
        let mut c = vec![0.0f32; s * s];
        let reps = 2000;
        let ours = best_s(runs, || {
            for _ in 0..reps {
                matmul(&a, &[s, s], &b, &[s, s], false, false, &mut c, 1, &none).unwrap();
            }
        });
        let direct = best_s(runs, || {
            for _ in 0..reps {
                crate_sgemm(s, s, s, &a, &b, &mut c, 1);
            }
        });
        println!(
            "  {s:>3}^3 (work {:>6}): matmul {:8.0}  crate {:8.0}",
            s * s * s,
            ours * 1e9 / reps as f64,
            direct * 1e9 / reps as f64
        );
    }
}

fn conv_section(runs: usize, only: &str, rng: &mut Rng) {
    let none: Epilogue<f32> = Epilogue::none();
    println!("conv, direct vs im2col + GEMM (us, best of {runs}; depth = C/g * K):");
    struct Case {
        name: &'static str,
        x: Vec<usize>,
        w: Vec<usize>,
        stride: Vec<i64>,
        pad: Vec<i64>,
        groups: i64,
    }
    let cases = [
        Case {
            name: "resnet 3x3 64ch 56x56",
            x: vec![1, 64, 56, 56],
            w: vec![64, 64, 3, 3],
            stride: vec![],
            pad: vec![1, 1, 1, 1],
            groups: 1,
        },
        Case {
            name: "stem 7x7/2 3->64 224",
            x: vec![1, 3, 224, 224],
            w: vec![64, 3, 7, 7],
            stride: vec![2, 2],
            pad: vec![3, 3, 3, 3],
            groups: 1,
        },
        Case {
            name: "depthwise 3x3 128ch 56x56",
            x: vec![1, 128, 56, 56],
            w: vec![128, 1, 3, 3],
            stride: vec![],
            pad: vec![1, 1, 1, 1],
            groups: 128,
        },
        Case {
            name: "mnist 5x5 1->8 28x28",
            x: vec![1, 1, 28, 28],
            w: vec![8, 1, 5, 5],
            stride: vec![],
            pad: vec![],
            groups: 1,
        },
        Case {
            name: "3x3 2->16 32x32",
            x: vec![1, 2, 32, 32],
            w: vec![16, 2, 3, 3],
            stride: vec![],
            pad: vec![1, 1, 1, 1],
            groups: 1,
        },
        Case {
            name: "3x3 4->16 32x32",
            x: vec![1, 4, 32, 32],
            w: vec![16, 4, 3, 3],
            stride: vec![],
            pad: vec![1, 1, 1, 1],
            groups: 1,
        },
        Case {
            name: "conv1d k3 64ch L1000",
            x: vec![1, 64, 1000],
            w: vec![64, 64, 3],
            stride: vec![],
            pad: vec![1, 1],
            groups: 1,
        },
        Case {
            name: "conv1d dw k7 256ch L512",
            x: vec![1, 256, 512],
            w: vec![256, 1, 7],
            stride: vec![],
            pad: vec![3, 3],
            groups: 256,
        },
    ];
    for case in cases.iter().filter(|c| c.name.contains(only)) {
        let geom = ConvGeom::new(&case.x, &case.w, &case.stride, &case.pad, &[], case.groups).expect("geometry");
        let x = rand(rng, case.x.iter().product());
        let w = rand(rng, case.w.iter().product());
        let mut out = vec![0.0f32; geom.out_len()];
        let mut line = format!("  {:<28} depth {:>4}:", case.name, geom.depth());
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
            pool.install(|| {
                let mut scratch = vec![0.0f32; geom.scratch_len_for(ConvAlgo::Im2col, threads)];
                let direct = best_s(runs, || {
                    conv_with(&geom, ConvAlgo::Direct, &x, &w, &mut out, None, threads, &none).unwrap()
                });
                let im2col = best_s(runs, || {
                    conv_with(&geom, ConvAlgo::Im2col, &x, &w, &mut out, Some(&mut scratch), threads, &none).unwrap()
                });
                line += &format!(
                    "  t{threads}: direct {:8.0} im2col {:8.0} ({:5.1} GFLOP/s best)",
                    direct * 1e6,
                    im2col * 1e6,
                    geom.flops() / direct.min(im2col) / 1e9
                );
            });
        }
        println!("{line}  [picks {:?}]", geom.algorithm());
    }
}
