//! `max_pool2d`'s CPU library kernel (native mode keeps the op whole) against the interpreter,
//! bit for bit, over the op's geometries on random and adversarial data; and the rewrite that
//! moves a pointwise op with a per-channel operand (a bias, a ReLU) after the pooling.

use ladder::interp::{self, Options};
use ladder::kernel::Step;
use ladder::passes::{simplify, SimplifyOptions};
use ladder::{compile, CompileOptions, OpKind, Tensor};

use crate::common::*;

/// A deterministic generator of f32 values in [-1, 1], with NaN, ±inf, ±0, huge and tiny
/// values scattered through when `adversarial`.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], adversarial: bool) -> Tensor {
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3e38, -3e38, 1e-40, -1e-40];
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| {
                let x = self.next();
                if adversarial && i % 5 == 2 {
                    specials[(i / 5 + (x.to_bits() as usize & 7)) % specials.len()]
                } else {
                    x
                }
            })
            .collect();
        f32t(shape, &v)
    }
}

fn pool_graph(shape: &[usize], attrs: &str) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("graph g(%x: f32[{}]) {{\n  %y = max_pool2d(%x) {{{attrs}}}\n  return %y\n}}", dims.join(", "))
}

fn pool_steps(p: &ladder::Plan) -> usize {
    let program = p.program().unwrap();
    program.steps.iter().filter(|s| matches!(s, Step::Library(l) if l.op == OpKind::MaxPool2d)).count()
}

/// Every geometry the op allows up to 3×3 windows (stride, padding up to half the kernel,
/// dilation, ceil mode), on planes from 1×1 to 33 columns (the vector paths' whole and
/// partial vectors and their borders), batched and unbatched: the library kernel gives the
/// interpreter's bits, NaN included (the canonical NaN, as from `max`), -0 below +0.
#[test]
fn native_kernel_matches_the_interpreter_bit_for_bit() {
    let mut gen = Gen(7);
    let native = CompileOptions::native_cpu(1).unwrap();
    let mut checked = 0;
    for (kh, kw) in [(1, 1), (2, 2), (3, 3), (1, 3), (2, 1)] {
        for (sh, sw) in [(1, 1), (2, 2), (3, 2), (1, 3)] {
            for pad in [(0, 0), (kh / 2, kw / 2)] {
                for dil in [1, 2] {
                    for ceil in [false, true] {
                        let attrs = format!(
                            "kernel=[{kh}, {kw}], stride=[{sh}, {sw}], padding=[{}, {}], dilation=[{dil}, {dil}], ceil_mode={ceil}",
                            pad.0, pad.1
                        );
                        for shape in [&[2, 3, 7, 33][..], &[3, 1, 5], &[1, 2, 1, 1], &[1, 1, 6, 16], &[2, 1, 4, 40]] {
                            // Geometries whose window does not fit the input are shape errors.
                            let Ok(g) = ladder::text::parse(&pool_graph(shape, &attrs)) else { continue };
                            let plan = compile(&g, &native).unwrap();
                            assert_eq!(pool_steps(&plan), 1, "{attrs} on {shape:?}");
                            for adversarial in [false, true] {
                                let x = gen.tensor(shape, adversarial);
                                let Ok(want) = interp::run(&g, std::slice::from_ref(&x), &Options::default()) else {
                                    continue;
                                };
                                let got = plan.run(std::slice::from_ref(&x)).unwrap().outputs.remove(0);
                                assert!(
                                    got.bit_eq(&want.outputs[0]),
                                    "{attrs} on {shape:?}: {got} vs {}",
                                    want.outputs[0]
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked >= 500, "{checked} cases");
}

/// Empty inputs and windows: an input with no rows or columns gives no windows, or, with
/// padding, windows over nothing (-inf, as the op pads).
#[test]
fn empty_planes_and_batches() {
    let native = CompileOptions::native_cpu(1).unwrap();
    for (shape, attrs) in [
        (&[0, 3, 4, 4][..], "kernel=[2, 2]"),
        (&[1, 2, 0, 4], "kernel=[2, 2]"),
        (&[1, 2, 3, 0], "kernel=[2, 2], padding=[1, 1]"),
        (&[1, 1, 1, 1], "kernel=[3, 3], stride=[1, 1], padding=[1, 1]"),
    ] {
        let g = parse(&pool_graph(shape, attrs));
        let plan = compile(&g, &native).unwrap();
        let x = Gen(3).tensor(shape, false);
        let want = interp::run(&g, std::slice::from_ref(&x), &Options::default()).unwrap().outputs.remove(0);
        let got = plan.run(std::slice::from_ref(&x)).unwrap().outputs.remove(0);
        assert!(got.bit_eq(&want), "{attrs} on {shape:?}: {got} vs {want}");
    }
}

/// Threads split the output rows: the same bits as one thread.
#[test]
fn threads_split_rows_without_changing_a_bit() {
    let mut gen = Gen(29);
    for attrs in ["kernel=[2, 2]", "kernel=[3, 3], stride=[2, 2], padding=[1, 1]"] {
        let g = parse(&pool_graph(&[2, 16, 32, 130], attrs));
        let one = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let two = compile(&g, &CompileOptions::native_cpu(2).unwrap()).unwrap();
        let x = gen.tensor(&[2, 16, 32, 130], true);
        let a = one.run(std::slice::from_ref(&x)).unwrap().outputs.remove(0);
        let b = two.run(std::slice::from_ref(&x)).unwrap().outputs.remove(0);
        assert!(a.bit_eq(&b), "{attrs}");
        let want = interp::run(&g, std::slice::from_ref(&x), &Options::default()).unwrap().outputs.remove(0);
        assert!(a.bit_eq(&want), "{attrs}");
    }
}

/// The ops of a graph in order.
fn ops(g: &ladder::Graph) -> Vec<OpKind> {
    g.nodes().map(|(_, n)| n.op).filter(|op| !matches!(op, OpKind::Input | OpKind::Const)).collect()
}

fn bias_relu_pool(x: &str, bias: &str, pool: &str) -> String {
    format!(
        "blob @b: f32[3, 1, 1] = [{bias}]
graph g(%x: f32[{x}]) {{
  %b = const @b : f32[3, 1, 1]
  %bb = broadcast_in_dim(%b) {{shape=[{x}], broadcast_dims=[1, 2, 3]}}
  %s = add(%x, %bb)
  %z = full() {{shape=[{x}], value=0.0}}
  %r = max(%s, %z)
  %y = max_pool2d(%r) {{{pool}}}
  return %y
}}"
    )
}

/// `max_pool2d(max(x + bias, 0))` becomes `max(max_pool2d(x) + bias, 0)`: the bias and ReLU run
/// on the pooled tensor. The same bits as the interpreter on the original, in op-dtype and
/// precise mode, on data with NaN, ±inf and ±0 against a bias holding ±0; with a bias that is
/// not finite (inf - inf would make a NaN only before the pooling), or padding over symbolic
/// sizes (a window might hold only padding), the graph stays as it was.
#[test]
fn a_bias_and_relu_move_after_the_pooling() {
    let cases = [
        ("2, 3, 6, 9", "0.5, -0.0, 0.0", "kernel=[2, 2]", true),
        ("2, 3, 6, 9", "0.5, -0.0, 0.0", "kernel=[3, 3], stride=[2, 2], padding=[1, 1]", true),
        ("2, 3, 6, 9", "0.5, inf, 0.0", "kernel=[2, 2]", false),
        ("n, 3, h, w", "0.5, -0.0, 0.0", "kernel=[2, 2]", true),
        ("n, 3, h, w", "0.5, -0.0, 0.0", "kernel=[3, 3], stride=[2, 2], padding=[1, 1]", false),
    ];
    let mut gen = Gen(41);
    for (x, bias, pool, expect) in cases {
        let g = parse(&bias_relu_pool(x, bias, pool));
        let s = simplify(&g, &SimplifyOptions::default()).unwrap().graph;
        let order = ops(&s);
        assert_eq!(order.first() == Some(&OpKind::MaxPool2d), expect, "{x} / {bias} / {pool}: {order:?}");
        if expect {
            // The bias and the ReLU at the pooled shape.
            let out = s.ty(s.outputs()[0].value).clone();
            for (_, n) in s.nodes().filter(|(_, n)| matches!(n.op, OpKind::Add | OpKind::Max)) {
                assert_eq!(n.ty, out, "{}", ladder::text::print(&s));
            }
            assert_eq!(order.iter().filter(|&&o| o == OpKind::Add || o == OpKind::Max).count(), 2, "{order:?}");
        }
        let inputs = [gen.tensor(&[2, 3, 6, 9], true)];
        for precise in [false, true] {
            let o = Options { precise, ..Options::default() };
            let want = interp::run(&g, &inputs, &o).unwrap().outputs.remove(0);
            let got = interp::run(&s, &inputs, &o).unwrap().outputs.remove(0);
            assert!(got.bit_eq(&want), "{x} / {bias} / {pool} precise={precise}: {got} vs {want}");
        }
        // And the native plan, pooling through the library kernel.
        let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let want = interp::run(&g, &inputs, &Options::default()).unwrap().outputs.remove(0);
        assert!(plan.run(&inputs).unwrap().outputs[0].bit_eq(&want), "{x} / {pool}: native");
    }
}

/// A pointwise op whose result is also read elsewhere stays before the pooling (moving it
/// would compute it twice).
#[test]
fn a_shared_pointwise_op_stays() {
    let src = "graph g(%x: f32[1, 2, 4, 4]) {
  %z = full() {shape=[1, 2, 4, 4], value=0.0}
  %r = max(%x, %z)
  %y = max_pool2d(%r) {kernel=[2, 2]}
  return %y, %r
}";
    let s = simplify(&parse(src), &SimplifyOptions::default()).unwrap().graph;
    assert_eq!(ops(&s), [OpKind::Full, OpKind::Max, OpKind::MaxPool2d]);
}
