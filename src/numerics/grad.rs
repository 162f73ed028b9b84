//! Gradient checks: the derivatives `crate::autodiff` builds against central finite
//! differences in f64, with the tolerance and input domain each op is held to.
//!
//! A check takes a graph (any rung; its differentiated inputs f64), its inputs and the inputs
//! to differentiate. It forms a scalar loss from the graph's float outputs, `Σ_o Σ (o · r_o)`
//! with `r_o` a fixed random tensor per output (an extra input, so every element of every
//! output is weighted differently: a random cotangent, not only ones), lowers that loss graph
//! to prims ([`GradCase::joint`]), builds its joint graph and runs it on the interpreter in
//! precise mode; then perturbs each element of each differentiated input by `±h` and runs the
//! loss graph itself (the high-level ops, evaluated as the oracle defines them) to form
//! `(L(x + h) - L(x - h)) / 2h` ([`GradCase::compare`]).
//!
//! Agreement: `|ad - fd| <= atol + rtol · max(|ad|, |fd|) + 8 ε |L| / h` per element, with
//! [`grad_tolerance`]'s numbers for the op under test (the last term is what the quotient
//! cannot resolve: the loss's rounding over the step); on random graphs ([`Kinks::Skip`]),
//! failing that, the same against the quotient with `h / 4` (a sixteenth of the truncation
//! error, four times the rounding term). Central differences with
//! `h = 1e-5 · max(1, |x|)` have a truncation error of about `h² |f'''| / 6` and a rounding
//! error of about `ε |L| / h` (`ε = 2^-52`), both below `1e-9` relative for the smooth inputs
//! the domains produce; the tolerances leave margins of several hundred (NUMERICS.md,
//! "Gradients", has the table and the measurements).
//!
//! Inputs stay away from kinks and domain edges: [`grad_domain`] says per op and argument
//! where data is drawn ([`Domain`]), and every domain keeps `|x| >= 0.1`, away from the kinks
//! at 0 (abs, relu, sign, max/min against 0). Where a random graph cannot avoid a kink
//! ([`Kinks::Skip`], for the fuzz target), an element whose difference quotient changes when
//! `h` shrinks fourfold, or whose difference interval moves a discrete value (a `floor`, an
//! integer or bool result, or the quotient a `rem` truncates: a step), or turns a `sin` or
//! `cos` by a radian or more (the quotient averages over its period), or where a sum loses
//! the interval's change to rounding (a huge term absorbing a small one, in an `add` or
//! inside a `matmul` or `conv`), or a saturated op's result is flat in f64 while its argument
//! moves (`erf(7)` is 1), is counted as a kink and not compared; so is a derivative that does
//! not scale with the loss's weights (its cotangents): a rule is linear in its cotangent, so
//! that derivative is the rounding of the backward, huge terms that cancel
//! ([`GradCase::compare`]); and so is an element at a kink of its own point (a maximum whose
//! argument is another at both points of the difference), where the derivatives at both
//! points agree with the quotient and the one at the point does not.

use std::fmt;

use crate::autodiff::{grad, partition, AdError, Costs, Joint, PartitionOptions, Policy};
use crate::decomp::Emitter;
use crate::interp::{self, Options};
use crate::ir::{AttrValue, DType, Graph, TensorType, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// How closely a derivative must match central differences.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradTolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// The tolerance a derivative through `op` is held to (see NUMERICS.md, "Gradients").
pub fn grad_tolerance(op: OpKind) -> GradTolerance {
    use OpKind::*;
    let (rtol, atol) = match op {
        // Contractions, normalisations, attention, losses, scans and recurrences: sums of
        // many products, whose difference quotients carry the most rounding (measured below
        // 3e-8 relative; `LADDER_GRAD_MARGINS=1` makes tests/all/autodiff.rs print margins).
        Matmul | Conv | Bmm | Linear | Addmm | Conv2d | ScaledDotProductAttention | Lstm | Cumsum => (1e-5, 1e-7),
        LayerNorm | GroupNorm | RmsNorm | BatchNorm | Var | Std | Softmax | LogSoftmax | Logsumexp | CrossEntropy
        | MseLoss | SliceScatter | SliceAssignInplace | Silu | Elu | LeakyRelu | Softplus => (1e-5, 1e-7),
        // Everything else: pointwise chains and data movement (measured below 1e-9 relative).
        _ => (1e-6, 1e-8),
    };
    GradTolerance { rtol, atol }
}

/// Where a check draws an argument's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// `±[0.1, 2]`: away from the kinks at 0.
    Any,
    /// `[0.5, 2]`: logarithms, roots, the base of `pow`, variances.
    Positive,
    /// `±[0.5, 2]`: divisors, factors of a product.
    AwayFromZero,
}

/// The domain of argument `arg` of `op` in a gradient check.
pub fn grad_domain(op: OpKind, arg: usize) -> Domain {
    use OpKind::*;
    match (op, arg) {
        (Log | Log1p | Sqrt | Rsqrt, _) | (Pow, 0) => Domain::Positive,
        // batch_norm(x, running_mean, running_var, ...).
        (BatchNorm, 2) => Domain::Positive,
        (Reciprocal | ReduceProd | Prod, _) | (Div | Rem | DivInplace, 1) => Domain::AwayFromZero,
        _ => Domain::Any,
    }
}

/// The checks' data and weights: `models::Rng`'s splitmix64 stream, with the draws they need.
#[derive(Clone, Debug)]
pub struct Rng(crate::models::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(crate::models::Rng::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One value of `domain`.
    pub fn draw(&mut self, domain: Domain) -> f64 {
        let sign = if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        match domain {
            Domain::Any => sign * (0.1 + 1.9 * self.unit()),
            Domain::Positive => 0.5 + 1.5 * self.unit(),
            Domain::AwayFromZero => sign * (0.5 + 1.5 * self.unit()),
        }
    }

    /// An f64 tensor of `shape` drawn from `domain`.
    pub fn tensor(&mut self, domain: Domain, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|_| self.draw(domain)).collect();
        Tensor::new(shape.to_vec(), TensorData::F64(values)).unwrap_or_else(|e| panic!("a bad tensor: {e}"))
    }
}

/// What to do where a random graph sits on a kink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinks {
    /// Every element is compared (the data was drawn away from kinks).
    Compare,
    /// Elements whose difference quotient is unstable in `h` are counted, not compared.
    Skip,
}

/// Why a check did not pass.
#[derive(Debug)]
pub enum GradFailure {
    /// The case cannot be checked (no float output, no float input to differentiate, a
    /// forward run that fails or a non-finite loss): not a defect.
    Unfit(String),
    /// The loss graph did not lower to prims.
    Lower(crate::passes::LowerError),
    /// The joint graph could not be built.
    Grad(AdError),
    /// The joint graph failed to run.
    Run(String),
    /// A derivative disagrees with the difference quotient.
    Mismatch { input: String, element: usize, ad: f64, fd: f64, tolerance: GradTolerance },
}

impl fmt::Display for GradFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GradFailure::Unfit(why) => write!(f, "not checkable: {why}"),
            GradFailure::Lower(why) => write!(f, "lowering the loss graph: {why}"),
            GradFailure::Grad(why) => write!(f, "building the joint graph: {why}"),
            GradFailure::Run(why) => write!(f, "running the joint graph: {why}"),
            GradFailure::Mismatch { input, element, ad, fd, tolerance } => write!(
                f,
                "d loss / d {input}[{element}]: autodiff {ad:e}, central difference {fd:e} (|diff| {:e} > {:e} + {:e} · max)",
                (ad - fd).abs(),
                tolerance.atol,
                tolerance.rtol
            ),
        }
    }
}

/// What a passing check compared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradCheck {
    /// Elements compared.
    pub compared: usize,
    /// Elements skipped ([`Kinks::Skip`]): kinks, and singular points (a non-finite
    /// derivative where the difference quotient is finite: the derivative of a branch a
    /// `where` does not take, infinite there, times the zero cotangent it gets), and elements
    /// whose change a sum loses to rounding.
    pub kinks: usize,
    /// The largest `|ad - fd|` over its allowance among the compared elements (below 1).
    pub worst: f64,
}

/// A graph with a loss formed from its float outputs, ready to differentiate and check.
#[derive(Clone, Debug)]
pub struct GradCase {
    /// The graph's inputs, then one weight per float output; one output, `loss`.
    pub loss_graph: Graph,
    /// The inputs of `loss_graph`.
    pub inputs: Vec<Tensor>,
    /// The differentiated inputs (indices into both graphs' inputs).
    pub wrt: Vec<usize>,
}

/// The name of the loss output of [`GradCase::loss_graph`].
pub const LOSS: &str = "loss";

impl GradCase {
    /// The loss graph of `g` on `inputs` (weights from `seed`), differentiating the inputs
    /// `wrt` (each must be f64).
    pub fn new(g: &Graph, inputs: &[Tensor], wrt: &[usize], seed: u64) -> Result<GradCase, GradFailure> {
        let unfit = |why: String| GradFailure::Unfit(why);
        for &i in wrt {
            if g.ty(g.inputs()[i]).dtype != DType::F64 {
                return Err(unfit(format!("input {} is not f64", g.input_name(i))));
            }
        }
        if wrt.is_empty() {
            return Err(unfit("no input to differentiate".into()));
        }
        let precise = Options { precise: true, ..Options::default() };
        let out = interp::run(g, inputs, &precise).map_err(|e| unfit(format!("the forward run fails: {e}")))?;
        let mut lg = g.clone();
        lg.outputs.clear();
        let mut inputs = inputs.to_vec();
        let mut rng = Rng::new(seed ^ 0x5EED_0FC0_7A4E_47A1);
        let mut terms: Vec<Value> = Vec::new();
        for (k, (o, t)) in g.outputs().iter().zip(&out.outputs).enumerate() {
            let ty = g.ty(o.value).clone();
            if !ty.dtype.is_float() {
                continue;
            }
            let w = lg.add_input(&format!("__weight{k}"), ty).map_err(|e| unfit(e.to_string()))?;
            let weights: Vec<f64> = (0..t.numel()).map(|_| rng.draw(Domain::Any)).collect();
            let wt = Tensor::from_f64_as(g.ty(o.value).dtype, t.shape(), &weights).map_err(|e| unfit(e.to_string()))?;
            inputs.push(wt);
            let mut e = Emitter { g: &mut lg, keep: &[] };
            let build = |e: &mut Emitter| -> Result<Value, crate::decomp::DecompError> {
                let p = e.mul(o.value, w)?;
                let p = e.convert(p, DType::F64)?;
                let axes: Vec<usize> = (0..e.rank(p)).collect();
                e.reduce(OpKind::ReduceSum, p, &axes, false)
            };
            terms.push(build(&mut e).map_err(|e| unfit(e.to_string()))?);
        }
        let Some((&first, rest)) = terms.split_first() else { return Err(unfit("no float output".into())) };
        let mut e = Emitter { g: &mut lg, keep: &[] };
        let mut loss = first;
        for &t in rest {
            loss = e.add(loss, t).map_err(|e| unfit(e.to_string()))?;
        }
        lg.add_output(LOSS, loss).map_err(|e| unfit(e.to_string()))?;
        let case = GradCase { loss_graph: lg, inputs, wrt: wrt.to_vec() };
        let l = case.loss(&case.inputs)?;
        if !l.is_finite() {
            return Err(unfit(format!("the loss is {l}")));
        }
        Ok(case)
    }

    /// The loss on `inputs`, evaluated in precise mode.
    pub fn loss(&self, inputs: &[Tensor]) -> Result<f64, GradFailure> {
        loss_of(&self.loss_graph, inputs)
    }

    /// The loss graph lowered to prims (keeping the high-level ops in `keep` whole, as the
    /// native pipeline keeps `ops::library::kept`), then its joint graph.
    pub fn joint(&self, keep: &[OpKind]) -> Result<Joint, GradFailure> {
        let lowered = crate::passes::lower::functional(&self.loss_graph).map_err(GradFailure::Lower)?;
        let prims = crate::passes::lower::prims(&lowered, keep).map_err(GradFailure::Lower)?;
        let names: Vec<String> = self.wrt.iter().map(|&i| self.loss_graph.input_name(i)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        grad(&prims, LOSS, &names).map_err(GradFailure::Grad)
    }

    /// The joint graph's gradients on the case's inputs, in precise mode: one per
    /// differentiated input, flattened.
    pub fn gradients(&self, joint: &Joint) -> Result<Vec<Vec<f64>>, GradFailure> {
        let precise = Options { precise: true, ..Options::default() };
        let out = interp::run(&joint.graph, &self.inputs, &precise).map_err(|e| GradFailure::Run(e.to_string()))?;
        Ok((0..self.wrt.len()).map(|i| out.outputs[joint.grad_output(i)].to_f64_vec()).collect())
    }

    /// Central differences of the loss computed by `forward` (see [`forward`]) in one element
    /// of input `input`, with step `h`.
    fn difference(&self, forward: &Graph, input: usize, element: usize, h: f64) -> Result<f64, GradFailure> {
        let mut inputs = self.inputs.clone();
        let mut values = inputs[input].to_f64_vec();
        let x = values[element];
        let shape = inputs[input].shape().to_vec();
        values[element] = x + h;
        inputs[input] =
            Tensor::new(shape.clone(), TensorData::F64(values.clone())).map_err(|e| GradFailure::Run(e.to_string()))?;
        let up = loss_of(forward, &inputs)?;
        values[element] = x - h;
        inputs[input] = Tensor::new(shape, TensorData::F64(values)).map_err(|e| GradFailure::Run(e.to_string()))?;
        let down = loss_of(forward, &inputs)?;
        Ok((up - down) / (2.0 * h))
    }

    /// The outputs after the first (the loss) of `g`, the loss graph with extra outputs, on
    /// the case's inputs with `element` of input `input` set to `x`, in precise mode.
    fn extra_outputs(&self, g: &Graph, input: usize, element: usize, x: f64) -> Result<Vec<Tensor>, GradFailure> {
        let mut inputs = self.inputs.clone();
        let mut values = inputs[input].to_f64_vec();
        values[element] = x;
        inputs[input] = Tensor::new(inputs[input].shape().to_vec(), TensorData::F64(values))
            .map_err(|e| GradFailure::Run(e.to_string()))?;
        let precise = Options { precise: true, ..Options::default() };
        let out = interp::run(g, &inputs, &precise).map_err(|e| GradFailure::Run(e.to_string()))?;
        Ok(out.outputs.into_iter().skip(1).collect())
    }

    /// [`GradCase::extra_outputs`] of `g` at the two points of the central difference for
    /// `element` of input `input` with step `h`: `(x - h, x + h)`.
    fn at_both_points(
        &self,
        g: &Graph,
        input: usize,
        element: usize,
        h: f64,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>), GradFailure> {
        let x = self.inputs[input].to_f64_vec()[element];
        Ok((self.extra_outputs(g, input, element, x - h)?, self.extra_outputs(g, input, element, x + h)?))
    }

    /// The loss graph lowered to prims with nothing kept whole: where the sums, quotients
    /// and angles the kink tests look at are.
    fn prims(&self) -> Result<Graph, GradFailure> {
        let lowered = crate::passes::lower::functional(&self.loss_graph).map_err(GradFailure::Lower)?;
        crate::passes::lower::prims(&lowered, &[]).map_err(GradFailure::Lower)
    }

    /// Whether a discrete value of the loss graph (a `floor`, `ceil`, `round` or
    /// `sign`, or any integer or bool result) differs between the two points of the central
    /// difference for `element` of input `input`: the interval then straddles a step, where
    /// the quotient measures the jump (a staircase of huge values, where every float is an
    /// integer, reads as the identity) and the derivative is the step's 0.
    fn steps_between(&self, input: usize, element: usize, h: f64) -> Result<bool, GradFailure> {
        use OpKind::*;
        let mut g = self.loss_graph.clone();
        let discrete: Vec<crate::ir::Value> = g
            .nodes()
            .filter(|(_, n)| !matches!(n.op, Input | Const))
            .filter(|(_, n)| matches!(n.op, Floor | Ceil | Round | Sign) || !n.ty.dtype.is_float())
            .map(|(v, _)| v)
            .collect();
        if discrete.is_empty() {
            return Ok(false);
        }
        for (i, &v) in discrete.iter().enumerate() {
            g.add_output(&format!("discrete{i}"), v).map_err(|e| GradFailure::Run(e.to_string()))?;
        }
        let (down, up) = self.at_both_points(&g, input, element, h)?;
        Ok(down.iter().zip(&up).any(|(a, b)| !a.bit_eq(b)))
    }

    /// Whether the truncated quotient `trunc(a / b)` of a float `rem` among the loss graph's
    /// prims changes between the two points of the central difference for `element` of input
    /// `input`: `rem` is a sawtooth that jumps by `b` there (a divisor near 0 packs hundreds of
    /// teeth into the interval, and the quotient measures their average slope), a step its
    /// derivative `1 - trunc(a / b) db/da` does not see.
    fn rem_steps_between(&self, input: usize, element: usize, h: f64) -> Result<bool, GradFailure> {
        let mut g = self.prims()?;
        let rems: Vec<Vec<Value>> = g
            .nodes()
            .filter(|(_, n)| n.op == OpKind::Rem && n.ty.dtype.is_float())
            .map(|(_, n)| n.args.to_vec())
            .collect();
        if rems.is_empty() {
            return Ok(false);
        }
        for (i, args) in rems.iter().enumerate() {
            let q = g.add_node(OpKind::Div, args, Default::default()).map_err(|e| GradFailure::Run(e.to_string()))?;
            g.add_output(&format!("quotient{i}"), q).map_err(|e| GradFailure::Run(e.to_string()))?;
        }
        let (down, up) = self.at_both_points(&g, input, element, h)?;
        Ok(down.iter().zip(&up).any(|(a, b)| {
            a.to_f64_vec().iter().zip(b.to_f64_vec()).any(|(a, b)| a.trunc().to_bits() != b.trunc().to_bits())
        }))
    }

    /// Whether the argument of a `sin` or `cos` among the loss graph's prims moves by a
    /// radian or more between the two points of the central difference for `element` of
    /// input `input`: the quotient then spans a sixth of a period or more (many periods,
    /// after a chain of `expm1`), and measures an average of the derivative over them, not
    /// its value at the point. The two quotients agree with each other there (both average),
    /// so the stability test does not catch it.
    fn oscillates(&self, input: usize, element: usize, h: f64) -> Result<bool, GradFailure> {
        let mut g = self.prims()?;
        let args: Vec<Value> = g
            .nodes()
            .filter(|(_, n)| matches!(n.op, OpKind::Sin | OpKind::Cos) && n.ty.dtype.is_float())
            .map(|(_, n)| n.args[0])
            .collect();
        if args.is_empty() {
            return Ok(false);
        }
        for (i, &v) in args.iter().enumerate() {
            g.add_output(&format!("angle{i}"), v).map_err(|e| GradFailure::Run(e.to_string()))?;
        }
        let (down, up) = self.at_both_points(&g, input, element, h)?;
        Ok(down.iter().zip(&up).any(|(a, b)| {
            a.to_f64_vec().iter().zip(b.to_f64_vec()).any(|(a, b)| {
                let turn = (b - a).abs();
                (turn >= 1.0 || turn.is_nan()) && (a.is_finite() || b.is_finite())
            })
        }))
    }

    /// Whether a sum among the loss graph's prims loses the change the difference interval
    /// for `element` of input `input` brings to its arguments: an `add`, `sub` or
    /// `reduce_sum` whose result's move between the two points differs from what its
    /// arguments' moves add up to by more than `rtol` (the comparison's relative tolerance)
    /// of that. A sum's derivative is 1 in each argument, so only rounding does that: a huge
    /// term absorbing a small one's change (a term past `1e80` after a chain of `expm1` beside
    /// terms of order 1), or part of it (`x²⁴` of 1e12 beside one of order 1, whose move then
    /// carries the sum's rounding at 1e-3, which a `cos` after it passes on), and the quotient
    /// then measures the rounding, not the derivative.
    ///
    /// The opaque `matmul` and `conv` sum products inside: being bilinear, their move is
    /// exactly `op(Δa, b̄) + op(ā, Δb)` (`Δ` the difference of the two points, the bar their
    /// mean), which is evaluated with no huge term beside the change (`Δ` is zero outside
    /// what moved), and the same test applies per element (a convolution of an input with
    /// itself whose terms reach `1e237`, where an element's change is lost in the sum).
    fn absorbed(&self, input: usize, element: usize, h: f64, rtol: f64) -> Result<bool, GradFailure> {
        use OpKind::*;
        let mut g = self.prims()?;
        let sums: Vec<(Value, OpKind, Vec<Value>)> = g
            .nodes()
            .filter(|(_, n)| matches!(n.op, Add | Sub | ReduceSum | Matmul | Conv) && n.ty.dtype.is_float())
            .map(|(v, n)| (v, n.op, n.args.to_vec()))
            .collect();
        if sums.is_empty() {
            return Ok(false);
        }
        let mut index: std::collections::HashMap<Value, usize> = std::collections::HashMap::new();
        for v in sums.iter().flat_map(|(v, _, args)| std::iter::once(v).chain(args)) {
            if !index.contains_key(v) {
                index.insert(*v, index.len());
                g.add_output(&format!("sum{}", index.len()), *v).map_err(|e| GradFailure::Run(e.to_string()))?;
            }
        }
        let (down, up) = self.at_both_points(&g, input, element, h)?;
        let shape = |v: &Value| up[index[v]].shape().to_vec();
        let (down, up): (Vec<Vec<f64>>, Vec<Vec<f64>>) =
            (down.iter().map(Tensor::to_f64_vec).collect(), up.iter().map(Tensor::to_f64_vec).collect());
        let moves = |v: &Value| -> Vec<f64> {
            let i = index[v];
            up[i].iter().zip(&down[i]).map(|(u, d)| u - d).collect()
        };
        let lost = |got: f64, sum: f64| {
            sum.is_finite() && got.is_finite() && sum != 0.0 && (got - sum).abs() > rtol * sum.abs()
        };
        for (v, op, arg_values) in &sums {
            let out = moves(v);
            let args: Vec<Vec<f64>> = arg_values.iter().map(moves).collect();
            let lose = if matches!(op, Matmul | Conv) {
                let point = |a: &Value, up_or_down: &[Vec<f64>]| up_or_down[index[a]].clone();
                let mean = |a: &Value| -> Vec<f64> {
                    point(a, &up).iter().zip(&point(a, &down)).map(|(u, d)| 0.5 * u + 0.5 * d).collect()
                };
                let (a, b) = (&arg_values[0], &arg_values[1]);
                let bilinear = Bilinear::new(&g, *v, [shape(a), shape(b)])?;
                let first = bilinear.eval(&args[0], &mean(b))?;
                let second = bilinear.eval(&mean(a), &args[1])?;
                (0..out.len()).any(|i| lost(out[i], first[i] + second[i]))
            } else if *op == ReduceSum {
                lost(out.iter().sum(), args[0].iter().sum())
            } else if args.iter().all(|a| a.len() == out.len()) {
                let sign = if *op == Sub { -1.0 } else { 1.0 };
                (0..out.len()).any(|i| lost(out[i], args[0][i] + sign * args[1][i]))
            } else {
                false
            };
            if lose {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a strictly monotone elementwise prim among the loss graph's (`exp`, `exp2`,
    /// `expm1`, `log`, `log1p`, `sqrt`, `rsqrt`, `reciprocal`, `tanh`, `erf`) rounds away
    /// the move the difference interval for `element` of input `input` brings to its
    /// argument: an element whose argument moves by more than 2⁻³⁰ of itself (far above
    /// rounding) while its result moves by no more than four units in its last place. The
    /// op's derivative is not 0 there, but its result is flat in f64 (`erf` of 7 is 1 exactly,
    /// its derivative `2/√π e⁻⁴⁹`), so whatever the derivative carries (a weight of `1e30`
    /// after it) the quotient does not see. (Rules written with the result, as `expm1`'s
    /// `ct · (y + 1)`, are 0 where the result is flat, as the quotient is.)
    fn flattened(&self, input: usize, element: usize, h: f64) -> Result<bool, GradFailure> {
        use OpKind::*;
        let mut g = self.prims()?;
        let pairs: Vec<(Value, Value)> = g
            .nodes()
            .filter(|(_, n)| {
                matches!(n.op, Exp | Exp2 | Expm1 | Log | Log1p | Sqrt | Rsqrt | Reciprocal | Tanh | Erf)
                    && n.ty.dtype.is_float()
            })
            .map(|(v, n)| (n.args[0], v))
            .collect();
        if pairs.is_empty() {
            return Ok(false);
        }
        for (i, &(a, y)) in pairs.iter().enumerate() {
            g.add_output(&format!("argument{i}"), a).map_err(|e| GradFailure::Run(e.to_string()))?;
            g.add_output(&format!("result{i}"), y).map_err(|e| GradFailure::Run(e.to_string()))?;
        }
        let (down, up) = self.at_both_points(&g, input, element, h)?;
        let (down, up): (Vec<Vec<f64>>, Vec<Vec<f64>>) =
            (down.iter().map(Tensor::to_f64_vec).collect(), up.iter().map(Tensor::to_f64_vec).collect());
        let moved = |d: f64, u: f64| (u - d).abs() > (0.5 * u + 0.5 * d).abs() * (-30f64).exp2();
        let flat = |d: f64, u: f64| (u - d).abs() <= 4.0 * f64::EPSILON * u.abs().max(d.abs());
        Ok((0..pairs.len()).any(|i| {
            let (a_down, a_up, y_down, y_up) = (&down[2 * i], &up[2 * i], &down[2 * i + 1], &up[2 * i + 1]);
            (0..a_up.len()).any(|k| {
                a_up[k].is_finite() && a_down[k].is_finite() && moved(a_down[k], a_up[k]) && flat(y_down[k], y_up[k])
            })
        }))
    }

    /// The gradients of `joint` with the loss's weights (the `__weight` inputs, the
    /// cotangents of the graph's outputs) scaled by each of [`RESCALES`], divided back by the
    /// scale: a derivative is linear in its cotangent, so each is the gradient again, up to
    /// the backward's rounding ([`GradCase::compare`] reads them where a derivative disagrees).
    /// None for a loss graph without weights (built by hand).
    fn rescaled_gradients(&self, joint: &Joint) -> Result<Vec<Vec<Vec<f64>>>, GradFailure> {
        let weights: Vec<usize> = (0..self.loss_graph.inputs().len())
            .filter(|&i| self.loss_graph.input_name(i).starts_with("__weight"))
            .collect();
        if weights.is_empty() {
            return Ok(Vec::new());
        }
        let mut all = Vec::with_capacity(RESCALES.len());
        for &scale in &RESCALES {
            let mut case = self.clone();
            for &i in &weights {
                let t = &self.inputs[i];
                let scaled: Vec<f64> = t.to_f64_vec().iter().map(|w| w * scale).collect();
                case.inputs[i] =
                    Tensor::from_f64_as(t.dtype(), t.shape(), &scaled).map_err(|e| GradFailure::Run(e.to_string()))?;
            }
            let grads = case.gradients(joint)?;
            all.push(grads.into_iter().map(|g| g.into_iter().map(|d| d / scale).collect()).collect());
        }
        Ok(all)
    }

    /// Element `element` of the gradient for input `input` (the `k`th differentiated one),
    /// with that element moved to `x`.
    fn derivative_at(&self, joint: &Joint, k: usize, input: usize, element: usize, x: f64) -> Result<f64, GradFailure> {
        let mut case = self.clone();
        let mut values = case.inputs[input].to_f64_vec();
        values[element] = x;
        case.inputs[input] = Tensor::new(case.inputs[input].shape().to_vec(), TensorData::F64(values))
            .map_err(|e| GradFailure::Run(e.to_string()))?;
        Ok(case.gradients(joint)?[k][element])
    }

    /// Compares `joint`'s gradients with central differences, element by element.
    pub fn compare(&self, joint: &Joint, tolerance: GradTolerance, kinks: Kinks) -> Result<GradCheck, GradFailure> {
        let grads = self.gradients(joint)?;
        let forward = forward(joint)?;
        let base = loss_of(&forward, &self.inputs)?;
        let mut check = GradCheck::default();
        let mut rescaled: Option<Vec<Vec<Vec<f64>>>> = None;
        for (k, (&input, ad)) in self.wrt.iter().zip(&grads).enumerate() {
            let values = self.inputs[input].to_f64_vec();
            debug_assert_eq!(values.len(), ad.len(), "gradient {k} has its input's shape");
            for (element, (&x, &ad)) in values.iter().zip(ad).enumerate() {
                let h = 1e-5 * x.abs().max(1.0);
                let fd = self.difference(&forward, input, element, h)?;
                // The quotient cannot resolve less than the rounding of the loss over `2h`.
                let noise = 8.0 * f64::EPSILON * base.abs() / h;
                let allowance = |fd: f64| tolerance.atol + noise + tolerance.rtol * ad.abs().max(fd.abs());
                let close = |fd: f64| (ad - fd).abs() <= allowance(fd);
                if close(fd) {
                    check.compared += 1;
                    check.worst = check.worst.max((ad - fd).abs() / allowance(fd));
                    continue;
                }
                if kinks == Kinks::Skip {
                    if !ad.is_finite() {
                        check.kinks += 1;
                        continue;
                    }
                    // A quarter of the step cuts the truncation error `h² f''' / 6` sixteenfold
                    // (and multiplies the rounding term by 4): a derivative that agrees with the
                    // finer quotient is right, the coarse one was off by its truncation (on
                    // random graphs, whose data is not kept smooth; the per-op checks on smooth
                    // data compare with the one quotient). Only comparing the two quotients
                    // with each other misses a truncation error just past the tolerance: they
                    // then differ by 15/16 of it.
                    let finer = self.difference(&forward, input, element, h / 4.0)?;
                    let finer_allowance = tolerance.atol + 4.0 * noise + tolerance.rtol * ad.abs().max(finer.abs());
                    if (ad - finer).abs() <= finer_allowance {
                        check.compared += 1;
                        check.worst = check.worst.max((ad - finer).abs() / finer_allowance);
                        continue;
                    }
                    let stable = (finer - fd).abs() <= tolerance.atol + tolerance.rtol * finer.abs().max(fd.abs());
                    // The cheap tests first; each of the others runs the graph again.
                    if !stable || !fd.is_finite() {
                        check.kinks += 1;
                        continue;
                    }
                    // A derivative that changes with the scale of its cotangent is the rounding
                    // of the backward (huge terms that cancel: a softmax's backward, whose row
                    // sums to 0, over values of 1e37), not a rule's value.
                    let rescaled = match &rescaled {
                        Some(r) => r,
                        None => rescaled.insert(self.rescaled_gradients(joint)?),
                    };
                    let linear = rescaled.iter().all(|grads| {
                        let again = grads[k][element];
                        (again - ad).abs() <= tolerance.atol + tolerance.rtol * again.abs().max(ad.abs())
                    });
                    // A kink at the point itself (a `reduce_max` whose maximum is another
                    // element at both points of the difference, and this one only at `x`): the
                    // derivatives at both points agree with the quotient, the one at `x` not. A
                    // wrong rule is wrong beside the point too.
                    let sided = |d: f64| (d - fd).abs() <= allowance(fd);
                    let at_kink = || -> Result<bool, GradFailure> {
                        Ok(sided(self.derivative_at(joint, k, input, element, x - h)?)
                            && sided(self.derivative_at(joint, k, input, element, x + h)?))
                    };
                    if !linear
                        || self.steps_between(input, element, h)?
                        || self.rem_steps_between(input, element, h)?
                        || self.oscillates(input, element, h)?
                        || self.absorbed(input, element, h, tolerance.rtol)?
                        || self.flattened(input, element, h)?
                        || at_kink()?
                    {
                        check.kinks += 1;
                        continue;
                    }
                }
                return Err(GradFailure::Mismatch {
                    input: self.loss_graph.input_name(input),
                    element,
                    ad,
                    fd,
                    tolerance,
                });
            }
        }
        Ok(check)
    }

    /// [`GradCase::joint`] then [`GradCase::compare`].
    pub fn check(&self, keep: &[OpKind], tolerance: GradTolerance, kinks: Kinks) -> Result<GradCheck, GradFailure> {
        let joint = self.joint(keep)?;
        self.compare(&joint, tolerance, kinks)
    }
}

/// The loss of a loss graph (its first output) on `inputs`, evaluated in precise mode.
fn loss_of(g: &Graph, inputs: &[Tensor]) -> Result<f64, GradFailure> {
    let precise = Options { precise: true, ..Options::default() };
    let out =
        interp::run(g, inputs, &precise).map_err(|e| GradFailure::Unfit(format!("the loss does not evaluate: {e}")))?;
    Ok(out.outputs[0].to_f64_vec()[0])
}

/// `joint`'s forward pass, its loss the only output: the function whose gradient the joint
/// graph computes, rounding for rounding. The central differences are taken on it and not on
/// the loss graph, whose high-level ops round differently from their decompositions (a
/// `hardswish` divides where its decomposition multiplies): where the graph is chaotic (the
/// `cos` of 1e161, which one ulp turns into another value), the two would be different
/// functions, a different element the maximum. The decompositions' own accuracy is the
/// `decomp` target's to check.
fn forward(joint: &Joint) -> Result<Graph, GradFailure> {
    let mut g = joint.graph.clone();
    let loss = g.outputs[joint.loss].clone();
    g.outputs = vec![loss];
    crate::passes::dce::eliminate_dead_code(&g).map_err(|e| GradFailure::Run(e.to_string()))
}

/// The scales [`GradCase::compare`] applies to a loss's weights to tell a derivative from
/// the rounding of its backward: near 1, not powers of two (which scale without rounding).
const RESCALES: [f64; 2] = [1.0 + 1.0 / 1024.0 / 3.0, 1.0 - 1.0 / 4096.0 / 7.0];

/// A `matmul` or `conv` node of a graph alone, on two inputs of its arguments' types, to
/// evaluate on other arguments ([`GradCase::absorbed`]).
struct Bilinear {
    graph: Graph,
    shapes: [Vec<usize>; 2],
}

impl Bilinear {
    /// Node `v` of `g` on arguments of the shapes the run gave them (`g`'s may be symbolic).
    fn new(g: &Graph, v: Value, shapes: [Vec<usize>; 2]) -> Result<Bilinear, GradFailure> {
        let fail = |e: &dyn fmt::Display| GradFailure::Run(e.to_string());
        let node = g.node(v);
        let mut graph = Graph::new("bilinear");
        let mut args = Vec::with_capacity(2);
        for (k, &a) in node.args.iter().enumerate() {
            let dims: Vec<u64> = shapes[k].iter().map(|&d| d as u64).collect();
            let ty = TensorType::new(g.ty(a).dtype, crate::ir::Shape::from_static(&dims));
            args.push(graph.add_input(&format!("a{k}"), ty).map_err(|e| fail(&e))?);
        }
        let out = graph.add_node(node.op, &args, node.attrs.clone()).map_err(|e| fail(&e))?;
        graph.add_output("out", out).map_err(|e| fail(&e))?;
        Ok(Bilinear { graph, shapes })
    }

    fn eval(&self, a: &[f64], b: &[f64]) -> Result<Vec<f64>, GradFailure> {
        let fail = |e: &dyn fmt::Display| GradFailure::Run(e.to_string());
        let dtype = |k: usize| self.graph.ty(self.graph.inputs()[k]).dtype;
        let tensor = |k: usize, x: &[f64]| Tensor::from_f64_as(dtype(k), &self.shapes[k], x);
        let inputs = [tensor(0, a).map_err(|e| fail(&e))?, tensor(1, b).map_err(|e| fail(&e))?];
        let precise = Options { precise: true, ..Options::default() };
        let out = interp::run(&self.graph, &inputs, &precise).map_err(|e| fail(&e))?;
        Ok(out.outputs[0].to_f64_vec())
    }
}

/// `g` with its float inputs and float constants made f64 and every node rebuilt on them
/// (attributes unchanged; each node's type inferred again). `None` when some node rejects
/// the new types.
pub fn to_f64(g: &Graph) -> Option<Graph> {
    let mut out = Graph::new(&g.name);
    let mut map: Vec<Option<Value>> = vec![None; g.len()];
    for (i, &v) in g.inputs().iter().enumerate() {
        let ty = g.ty(v);
        let dtype = if ty.dtype.is_float() { DType::F64 } else { ty.dtype };
        map[v.as_u32() as usize] =
            Some(out.add_input(&g.input_name(i), TensorType::new(dtype, ty.shape.clone())).ok()?);
    }
    for (v, node) in g.nodes() {
        let new = match node.op {
            OpKind::Input => continue,
            OpKind::Const => {
                let blob = g.blob(g.const_blob(v)?);
                let t = &blob.tensor;
                let t = if t.dtype().is_float() {
                    Tensor::new(t.shape().to_vec(), TensorData::F64(t.to_f64_vec())).ok()?
                } else {
                    (**t).clone()
                };
                let id = match out.blob_by_name(&blob.name) {
                    Some(id) => id,
                    None => out.add_blob(&blob.name, std::sync::Arc::new(t)).ok()?,
                };
                out.add_const(id)
            }
            op => {
                let args: Vec<Value> = node.args.iter().map(|a| map[a.as_u32() as usize]).collect::<Option<_>>()?;
                out.add_node(op, &args, node.attrs.clone()).ok()?
            }
        };
        map[v.as_u32() as usize] = Some(new);
    }
    for o in g.outputs() {
        out.add_output(&o.name, map[o.value.as_u32() as usize]?).ok()?;
    }
    Some(out)
}

/// The ops `op`'s lowering emits (functionalization, then decomposition; sources left out),
/// found by lowering eight generated instances of it ([`crate::numerics::generate_case`]:
/// attributes, dtypes and shapes vary; up to 64 seeds tried): what its derivative is made
/// of. `None` when no instance lowers.
pub fn lowered_ops(op: OpKind) -> Option<std::collections::BTreeSet<OpKind>> {
    let mut ops = std::collections::BTreeSet::new();
    let mut lowered = 0;
    for seed in 0..64 {
        if lowered == 8 {
            break;
        }
        let Some(case) = crate::numerics::generate_case(op, &crate::gen::seeded_bytes(seed, 64)) else { continue };
        let Ok(l) = crate::numerics::lower_to_prims(&case.graph) else { continue };
        lowered += 1;
        ops.extend(l.graph.nodes().map(|(_, n)| n.op).filter(|o| !matches!(o, OpKind::Input | OpKind::Const)));
    }
    (lowered > 0).then_some(ops)
}

/// Largest magnitude of a float constant in a graph [`check_random_graph`] differentiates.
/// Beside a larger one, a central difference's step is lost to rounding (`x - 1e30` is
/// `-1e30` for every `x` near 1), so the difference says 0 where the derivative is not.
pub const MAX_CONSTANT: f64 = 1e4;

/// Smallest magnitude of a non-zero float constant in a graph [`check_random_graph`]
/// differentiates. Below it a function can change on a scale finer than the difference's step
/// (`rem(x, 1e-40)` is a sawtooth of period `1e-40`: its derivative is 1 almost everywhere,
/// while a difference over `2h = 2e-5` averages it to 0).
pub const MIN_CONSTANT: f64 = 1.0 / MAX_CONSTANT;

/// Whether every float constant of `g` (blob data and `full` values) is finite, within
/// [`MAX_CONSTANT`], and zero or at least [`MIN_CONSTANT`], every integer constant within
/// [`MAX_CONSTANT`], and no float attribute finite and
/// past [`MAX_CONSTANT`] (an infinite one makes the values it scales infinite: unfit already).
fn smooth_constants(g: &Graph) -> bool {
    let fits = |x: f64| x.is_finite() && x.abs() <= MAX_CONSTANT && (x == 0.0 || x.abs() >= MIN_CONSTANT);
    // Integer constants are data as integer inputs are: past `MAX_CONSTANT` they swamp the
    // step too (`rem(4294967293, cos x)` moves through thousands of quotients across it).
    let fits_as = |float: bool, x: f64| if float { fits(x) } else { x.abs() <= MAX_CONSTANT };
    let blobs = g.blobs().all(|(_, b)| {
        let float = b.tensor.dtype().is_float();
        b.tensor.to_f64_vec().into_iter().all(|x| fits_as(float, x))
    });
    let fulls = g.nodes().all(|(_, n)| n.op != OpKind::Full || fits_as(n.ty.dtype.is_float(), n.attrs.float("value")));
    // Float attributes scale data as constants do (`leaky_relu {negative_slope=1e30}`); a
    // small one is ordinary (an `eps`, a slope) except where the op divides by it
    // (`softplus {beta=1e-40}` is `log 2 / beta` plus a slope the f64 loss cannot resolve).
    let divides = |op: OpKind| op == OpKind::Softplus;
    let attrs = g.nodes().all(|(_, n)| {
        n.attrs.iter().all(|(_, a)| match a {
            AttrValue::Float(x) if x.is_finite() => x.abs() <= MAX_CONSTANT && (!divides(n.op) || fits(*x)),
            _ => true,
        })
    });
    blobs && fulls && attrs
}

/// The fuzz target's check (`fuzz/fuzz_targets/grad.rs`): a random graph from `bytes`
/// (`crate::gen::random_graph`, every rung), made f64, on smooth data, differentiated with
/// respect to every f64 input and compared with central differences, kinks and singular
/// points skipped. `Ok(None)`: the graph is not checkable (no float output or input, a
/// forward run that fails, a non-finite loss, a decomposition or derivative that refuses a
/// symbolic case it cannot express, a float constant past [`MAX_CONSTANT`] or below
/// [`MIN_CONSTANT`], an integer input or constant past [`MAX_CONSTANT`]). `Err`: a
/// defect, with the graph's text.
pub fn check_random_graph(bytes: &[u8]) -> Result<Option<GradCheck>, String> {
    use crate::decomp::DecompError;
    use crate::gen::{random_graph, random_tensor, GenConfig, Source};
    use crate::passes::{DecomposeError, FunctionalizeError, LowerError};
    let mut src = Source::new(bytes);
    let g = random_graph(&mut src, &GenConfig { odd_names: false, ..GenConfig::default() });
    let Some(g) = to_f64(&g) else { return Ok(None) };
    if !smooth_constants(&g) {
        return Ok(None);
    }
    let seed = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    let mut rng = Rng::new(seed);
    let bind = |s: &str| Some(2 + s.len() as u64 % 2);
    let mut inputs = Vec::with_capacity(g.inputs().len());
    for &v in g.inputs() {
        let ty = g.ty(v);
        let Ok(shape) =
            ty.shape.dims().iter().map(|d| d.eval(&bind).map(|n| n as usize)).collect::<Result<Vec<_>, _>>()
        else {
            return Ok(None);
        };
        inputs.push(if ty.dtype == DType::F64 {
            rng.tensor(Domain::Any, &shape)
        } else {
            random_tensor(&mut src, ty.dtype, &shape)
        });
    }
    // An integer input is data too: past `MAX_CONSTANT` it swamps a difference's step as a
    // huge constant does (`x1 + 1e19`).
    let huge = |t: &Tensor| !t.dtype().is_float() && t.to_f64_vec().iter().any(|v| v.abs() > MAX_CONSTANT);
    if inputs.iter().any(huge) {
        return Ok(None);
    }
    let wrt: Vec<usize> = (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype == DType::F64).collect();
    let text = || crate::text::print(&g);
    let case = match GradCase::new(&g, &inputs, &wrt, seed) {
        Ok(case) => case,
        Err(GradFailure::Unfit(_)) => return Ok(None),
        Err(e) => return Err(format!("{e}\n{}", text())),
    };
    let tolerance = GradTolerance { rtol: 1e-4, atol: 1e-6 };
    let checked = case.joint(&[]).and_then(|joint| Ok((case.compare(&joint, tolerance, Kinks::Skip)?, joint)));
    match checked {
        Ok((check, joint)) => {
            check_partition(&joint, &case.inputs).map_err(|e| format!("{e}\n{}", text()))?;
            Ok(Some(check))
        }
        Err(GradFailure::Unfit(_)) => Ok(None),
        // A decomposition or a rule that cannot express a symbolic case says so.
        Err(GradFailure::Lower(LowerError::Decompose(DecomposeError::Node {
            error: DecompError::Unsupported { .. },
            ..
        }))) => Ok(None),
        Err(GradFailure::Grad(AdError::Rule { error: DecompError::Unsupported { .. }, .. })) => Ok(None),
        // So does functionalization (a strided write through a slice of symbolic length).
        Err(GradFailure::Lower(LowerError::Functionalize(FunctionalizeError::SymbolicStridedWrite { .. }))) => Ok(None),
        Err(e) => Err(format!("{e}\n{}", text())),
    }
}

/// Checks every partition of `joint` ([`crate::autodiff::partition`], each [`Policy`]) on
/// `inputs`: the forward graph, then the backward graph on the saved values, both run on the
/// interpreter, give the joint graph's outputs bit for bit (recomputation repeats the same
/// prims on the same values); and the minimum cut saves no more bytes than saving everything.
/// Returns each policy's costs, in [`Policy::NAMES`] order.
pub fn check_partition(joint: &Joint, inputs: &[Tensor]) -> Result<[Costs; 3], String> {
    // In the dtype (precise mode computes f32 values in f64, which a saved value cannot carry
    // to the backward's f32 input).
    let precise = Options::default();
    let want = interp::run(&joint.graph, inputs, &precise).map_err(|e| format!("the joint graph does not run: {e}"))?;
    let mut costs = [Costs::default(); 3];
    for (k, policy) in [Policy::MinCut, Policy::SaveAll, Policy::RecomputeAll].into_iter().enumerate() {
        let options = PartitionOptions { policy, ..PartitionOptions::default() };
        let p = partition(joint, &options).map_err(|e| format!("{}: {e}", policy.name()))?;
        let fail = |what: String| format!("partition {}: {what}", policy.name());
        let fw = interp::run(&p.forward, inputs, &precise).map_err(|e| fail(format!("the forward fails: {e}")))?;
        let mut saved_outputs = fw.outputs[joint.n_forward..].iter();
        let mut bw_inputs = Vec::with_capacity(p.saved.len());
        for s in &p.saved {
            let t = if s.is_input {
                let i = joint
                    .graph
                    .inputs()
                    .iter()
                    .position(|&x| x == s.value)
                    .ok_or_else(|| fail("a lost input".into()))?;
                inputs[i].clone()
            } else {
                saved_outputs.next().cloned().ok_or_else(|| fail("fewer saved outputs than saved values".into()))?
            };
            bw_inputs.push(t);
        }
        let bw =
            interp::run(&p.backward, &bw_inputs, &precise).map_err(|e| fail(format!("the backward fails: {e}")))?;
        let got = fw.outputs[..joint.n_forward].iter().chain(&bw.outputs);
        for (i, (w, g)) in want.outputs.iter().zip(got).enumerate() {
            if !same_bits(w, g) {
                let name = &joint.graph.outputs()[i].name;
                return Err(fail(format!("output `{name}` differs from the joint graph's")));
            }
        }
        if want.outputs.len() != joint.n_forward + bw.outputs.len() {
            return Err(fail(format!(
                "{} outputs, the joint graph has {}",
                joint.n_forward + bw.outputs.len(),
                want.outputs.len()
            )));
        }
        costs[k] = p.report.chosen;
    }
    if costs[0].saved_bytes > costs[1].saved_bytes {
        return Err(format!(
            "the minimum cut saves {} bytes, more than save-all's {}",
            costs[0].saved_bytes, costs[1].saved_bytes
        ));
    }
    Ok(costs)
}

/// The same dtype, shape and bits (any NaN equal to any NaN).
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}
