//! Winograd `F(2×2, 3×3)` for 3×3 stride-1 convolutions (`conv_blocked/winograd.rs`, run
//! by `PackedWeights::conv` and `conv_pooled`): which geometries take it; its results
//! against the direct kernel within the error bound of a reassociated sum (relative to
//! `Σ |w·x|`, as the GEMM-based algorithms are checked), on every shape edge (odd rows and
//! columns, tile rows padded to a vector, asymmetric and no padding, output channels that
//! are not a multiple of the register block, one-pixel images), with poolings fused and not,
//! epilogues, 1 and 2 threads, and magnitudes from 1e-30 to 1e20; and inputs outside what
//! the transforms keep to that bound (NaN, ±inf, values that could overflow a transformed
//! product) taking the direct kernel, bit for bit. CI runs these under each ISA cap.

use ladder::backend::cpu::activation::Activation;
use ladder::backend::cpu::conv::ConvGeom;
use ladder::backend::cpu::conv_blocked::{conv_blocked, pack, packed_len, winograd, PackedWeights};
use ladder::backend::cpu::gemm::Epilogue;
use ladder::backend::cpu::pool::{max_pool2d, RowPool};
use ladder::ir::{AttrValue, Attrs};
use ladder::models::{random_tensor, Rng};
use ladder::{DType, OpKind};

fn geom(batch: usize, cin: usize, cout: usize, h: usize, w: usize, pads: [i64; 4]) -> ConvGeom {
    ConvGeom::new(&[batch, cin, h, w], &[cout, cin, 3, 3], &[1, 1], &pads, &[1, 1], 1).unwrap()
}

fn pool_attrs(kernel: [i64; 2], stride: [i64; 2]) -> Attrs {
    let given = vec![
        ("kernel".to_string(), AttrValue::Ints(kernel.to_vec())),
        ("stride".to_string(), AttrValue::Ints(stride.to_vec())),
        ("padding".to_string(), AttrValue::Ints(vec![0, 0])),
        ("ceil_mode".to_string(), AttrValue::Bool(false)),
    ];
    Attrs::resolve(OpKind::MaxPool2d.spec().attrs, given).unwrap()
}

fn uniform(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    let t = random_tensor(rng, DType::F32, &[n]).unwrap();
    t.as_f32().unwrap().iter().map(|v| v * scale).collect()
}

/// The direct kernel's result, pooled by `attrs` if given.
fn direct(g: &ConvGeom, x: &[f32], w: &[f32], pool: Option<&Attrs>) -> Vec<f32> {
    let mut wp = vec![0.0; packed_len(g)];
    pack(g, w, &mut wp);
    let mut y = vec![0.0; g.out_len()];
    conv_blocked(g, x, &wp, &mut y, 1, &Epilogue::none());
    let Some(attrs) = pool else { return y };
    let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
    let rows = RowPool::new(attrs, oh, ow).unwrap().unwrap();
    let mut p = vec![0.0; g.batch * g.out_ch * rows.out_rows() * rows.out_cols()];
    max_pool2d(attrs, &y, &[g.batch, g.out_ch, oh, ow], &mut p, 1).unwrap();
    p
}

#[test]
fn stride_1_3x3_convolutions_with_16_channels_or_more_take_winograd() {
    let pool22 = RowPool::new(&pool_attrs([2, 2], [2, 2]), 8, 8).unwrap().unwrap();
    let pool33 = RowPool::new(&pool_attrs([3, 3], [3, 3]), 9, 8).unwrap().unwrap();
    assert!(winograd(&geom(1, 16, 16, 8, 8, [1; 4]), None));
    assert!(winograd(&geom(2, 48, 32, 20, 28, [1; 4]), None));
    assert!(winograd(&geom(1, 16, 16, 8, 8, [1; 4]), Some(&pool22)));
    // A pooling of bands of three rows does not fit a tile's two.
    assert!(!winograd(&geom(1, 16, 16, 9, 8, [1; 4]), Some(&pool33)));
    // Too few channels either side; another kernel, stride, dilation or groups.
    assert!(!winograd(&geom(1, 15, 32, 8, 8, [1; 4]), None));
    assert!(!winograd(&geom(1, 32, 8, 8, 8, [1; 4]), None));
    let k5 = ConvGeom::new(&[1, 16, 8, 8], &[16, 16, 5, 5], &[1, 1], &[2; 4], &[1, 1], 1).unwrap();
    let s2 = ConvGeom::new(&[1, 16, 8, 8], &[16, 16, 3, 3], &[2, 2], &[1; 4], &[1, 1], 1).unwrap();
    let d2 = ConvGeom::new(&[1, 16, 8, 8], &[16, 16, 3, 3], &[1, 1], &[2; 4], &[2, 2], 1).unwrap();
    let g2 = ConvGeom::new(&[1, 32, 8, 8], &[32, 16, 3, 3], &[1, 1], &[1; 4], &[1, 1], 2).unwrap();
    for g in [k5, s2, d2, g2] {
        assert!(!winograd(&g, None), "{g:?}");
    }
}

/// `|got − want| ≤ 1e-5 · Σ |w·x| + 1e-6 |want|` per output (`Σ |w·x|` pooled like the
/// outputs: the largest of the window's bounds); NaN where the other is NaN only.
fn within_bound(got: &[f32], want: &[f32], scale: &[f32]) -> Result<(), String> {
    assert_eq!((got.len(), want.len()), (want.len(), scale.len()));
    for (i, ((&a, &b), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let tol = 1e-5 * f64::from(s) + 1e-6 * f64::from(b).abs();
        let ok = (a.is_nan() && b.is_nan()) || a == b || (f64::from(a) - f64::from(b)).abs() <= tol;
        if !ok {
            return Err(format!("output {i}: {a} against {b} (bound {tol:e})"));
        }
    }
    Ok(())
}

#[test]
fn winograd_results_are_within_the_reassociation_bound_of_the_direct_kernel() {
    // (batch, in, out, height, width, padding [top, left, bottom, right])
    let convs = [
        (1, 16, 16, 8, 8, [1, 1, 1, 1]),
        (2, 16, 32, 16, 128, [1, 1, 1, 1]),
        (1, 48, 32, 20, 28, [1, 1, 1, 1]),
        (2, 17, 23, 7, 9, [1, 1, 1, 1]),
        (1, 32, 16, 5, 3, [0, 0, 0, 0]),
        (1, 20, 40, 6, 33, [2, 1, 0, 2]),
        (1, 16, 16, 1, 1, [1, 1, 1, 1]),
        (3, 16, 24, 2, 70, [1, 1, 1, 1]),
        (1, 24, 16, 3, 35, [1, 0, 1, 0]),
    ];
    // Poolings after the convolution: none, the two done in registers, one through the
    // band path (a window 3 wide).
    let pools = [None, Some(([2, 2], [2, 2])), Some(([2, 1], [2, 1])), Some(([2, 3], [2, 1]))];
    let mut rng = Rng::new(41);
    let mut ran = 0;
    for (batch, cin, cout, h, w, pads) in convs {
        let w_shape = [cout, cin, 3, 3];
        let weights = uniform(&mut rng, cout * cin * 9, 1.0);
        let packed = PackedWeights::new(&w_shape, 1, &weights).unwrap();
        let g = geom(batch, cin, cout, h, w, pads);
        let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
        let abs_w: Vec<f32> = weights.iter().map(|v| v.abs()).collect();
        let bias: Vec<f32> = (0..cout).map(|c| [0.5, -0.0, -1.25][c % 3]).collect();
        for scale in [1.0f32, 1e20, 1e-30] {
            let x = uniform(&mut rng, batch * cin * h * w, scale);
            let abs_x: Vec<f32> = x.iter().map(|v| v.abs()).collect();
            for pool in pools {
                let attrs = pool.map(|(k, s)| pool_attrs(k, s));
                // A window larger than the result has nothing to pool.
                let rows = match &attrs {
                    None => None,
                    Some(a) => match RowPool::new(a, oh, ow) {
                        Ok(Some(r)) if r.out_rows() > 0 && r.out_cols() > 0 => Some(r),
                        _ => continue,
                    },
                };
                assert!(winograd(&g, rows.as_ref()), "{g:?}");
                let want = direct(&g, &x, &weights, attrs.as_ref());
                let bound = direct(&g, &abs_x, &abs_w, attrs.as_ref());
                let plane = want.len() / (batch * cout);
                let res = uniform(&mut rng, want.len(), scale);
                let epilogued: Vec<f32> =
                    want.iter().enumerate().map(|(i, v)| (v + bias[(i / plane) % cout]).max(0.0) + res[i]).collect();
                for threads in [1, 2] {
                    let case = format!(
                        "{batch}x{cin}->{cout} {h}x{w} pads {pads:?}, x·{scale:e}, pool {pool:?}, threads {threads}"
                    );
                    let mut got = vec![f32::NAN; want.len()];
                    assert!(packed.conv_pooled(&g, rows.as_ref(), &x, &mut got, threads, &Epilogue::none()).unwrap());
                    within_bound(&got, &want, &bound).unwrap_or_else(|e| panic!("{case}: {e}"));
                    let epi = Epilogue {
                        bias: Some(&bias),
                        activation: Activation::Relu,
                        residual: Some(&res),
                        ..Epilogue::none()
                    };
                    let mut got = vec![f32::NAN; want.len()];
                    assert!(packed.conv_pooled(&g, rows.as_ref(), &x, &mut got, threads, &epi).unwrap());
                    let bound_e: Vec<f32> = bound.iter().zip(&res).map(|(b, r)| b + r.abs()).collect();
                    within_bound(&got, &epilogued, &bound_e).unwrap_or_else(|e| panic!("{case}, epilogue: {e}"));
                    ran += 1;
                }
            }
        }
    }
    assert!(ran >= convs.len() * 3 * 3 * 2, "{ran} cases ran");
}

/// Where an input is NaN, ±inf, or large enough that a transformed product could overflow
/// (`f32::MAX / (324 · C · max |w|)`), the direct kernel runs: its bits exactly, NaN and
/// infinities where it puts them.
#[test]
fn inputs_outside_the_transforms_bound_take_the_direct_kernel() {
    let (batch, cin, cout, h, w) = (2, 16, 24, 6, 20);
    let g = geom(batch, cin, cout, h, w, [1; 4]);
    let mut rng = Rng::new(43);
    for wscale in [1.0f32, 1e30] {
        let weights = uniform(&mut rng, cout * cin * 9, wscale);
        let packed = PackedWeights::new(&[cout, cin, 3, 3], 1, &weights).unwrap();
        for (special, at) in [(f32::NAN, 5), (f32::INFINITY, 77), (f32::NEG_INFINITY, 1000), (3e38, 3), (1e10, 9)] {
            let mut x = uniform(&mut rng, batch * cin * h * w, 1.0);
            x[at] = special;
            // 1e10 is inside the bound for weights of 1 and outside it for weights of 1e30.
            if special == 1e10 && wscale == 1.0 {
                continue;
            }
            let want = direct(&g, &x, &weights, None);
            for threads in [1, 2] {
                let mut got = vec![0.0; want.len()];
                assert!(packed.conv(&g, &x, &mut got, threads, &Epilogue::none()).unwrap());
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(same, "x[{at}] = {special}, weights ·{wscale:e}, threads {threads}");
            }
        }
    }
}
