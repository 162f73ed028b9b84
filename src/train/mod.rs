//! Training: a model's loss differentiated (`crate::autodiff::grad`), split by the
//! partitioner into a forward and a backward graph (`crate::autodiff::partition`), the
//! optimizer's update appended to the backward as a functional epilogue (each parameter and
//! each optimizer state an input, its new value an output), and both compiled as ordinary
//! plans. A step runs the forward, hands the saved values to the backward, and takes the new
//! parameters and states from its outputs.
//!
//! ```text
//! forward:  data, params             -> loss, saved_*
//! update:   saved inputs, saved_*,
//!           params, state, scalars   -> params', state'
//! ```
//!
//! The update is the optimizer's definition in prims, so the interpreter is its oracle like
//! any graph's. Adam's bias corrections depend on the step count: the host folds them into
//! two scalar inputs per step (`lr_t = lr · √(1 - β₂ᵗ) / (1 - β₁ᵗ)` and `eps_t = eps · √(1 - β₂ᵗ)`,
//! the form of Kingma and Ba's algorithm 1 with the corrections moved off the moments), so
//! the compiled plan is the same at every step.

pub mod models;

use std::time::Instant;

use crate::autodiff::{Partition, PartitionOptions};
use crate::decomp::{DecompError, Emitter};
use crate::ir::{DType, Graph, GraphError, Shape, TensorType, Value};
use crate::ops::OpKind;
use crate::pipeline::{Differentiate, Mode, PipelineError};
use crate::runtime::Outputs;
use crate::runtime::{compile, CompileError, CompileOptions, Plan, RunError, StepTime};
use crate::tensor::{Tensor, TensorView};

/// How parameters move along their gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// `b = μ b + g; p -= lr · b` (plain SGD when `momentum` is 0).
    Sgd { lr: f64, momentum: f64 },
    /// Adam (Kingma and Ba): `m = β₁ m + (1 - β₁) g; v = β₂ v + (1 - β₂) g²;
    /// p -= lr · m̂ / (√v̂ + eps)`.
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64 },
}

impl Optimizer {
    /// Adam with the usual constants (`β₁ = 0.9, β₂ = 0.999, eps = 1e-8`).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }

    /// The optimizer state per parameter, by name prefix: `m_`, `v_` (Adam) or `b_` (SGD
    /// with momentum).
    fn states(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => &[],
            Optimizer::Sgd { .. } => &["b_"],
            Optimizer::Adam { .. } => &["m_", "v_"],
        }
    }

    /// The scalar inputs of step `t` (counted from 1): `lr` for SGD, `lr_t` and `eps_t` for
    /// Adam.
    fn scalars(&self, t: u64) -> Vec<f64> {
        match *self {
            Optimizer::Sgd { lr, .. } => vec![lr],
            Optimizer::Adam { lr, beta1, beta2, eps } => {
                let t = t.min(i32::MAX as u64) as i32;
                let c2 = (1.0 - beta2.powi(t)).sqrt();
                vec![lr * c2 / (1.0 - beta1.powi(t)), eps * c2]
            }
        }
    }

    fn scalar_names(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { .. } => &["lr"],
            Optimizer::Adam { .. } => &["lr_t", "eps_t"],
        }
    }
}

/// Why a training step could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("building the update: {0}")]
    Update(String),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// A parameter or data input is missing, unknown or of the wrong type.
    #[error("{0}")]
    Input(String),
}

impl From<GraphError> for TrainError {
    fn from(e: GraphError) -> TrainError {
        TrainError::Update(e.to_string())
    }
}

impl From<DecompError> for TrainError {
    fn from(e: DecompError) -> TrainError {
        TrainError::Update(e.to_string())
    }
}

/// How to build a [`Trainer`].
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub optimizer: Optimizer,
    pub partition: PartitionOptions,
    pub compile: CompileOptions,
}

impl Default for TrainOptions {
    fn default() -> TrainOptions {
        TrainOptions {
            optimizer: Optimizer::adam(1e-3),
            partition: PartitionOptions::default(),
            compile: CompileOptions::default(),
        }
    }
}

/// Where an input of the update plan comes from at each step.
#[derive(Clone, Debug)]
enum Source {
    /// Input `i` of the model (a parameter or data).
    Model(usize),
    /// Output `i` of the forward plan (a saved value).
    Forward(usize),
    /// Optimizer state `k` of parameter `p`.
    State { p: usize, k: usize },
    /// The optimizer's scalar `k`.
    Scalar(usize),
}

/// A compiled training step and the parameters and optimizer state it updates.
pub struct Trainer {
    forward: Plan,
    update: Plan,
    /// The plans' outputs, kept between steps as buffers to write into.
    forward_out: Outputs,
    update_out: Outputs,
    sources: Vec<Source>,
    /// The model's inputs: which are parameters (their index into `params`), and the names.
    input_names: Vec<String>,
    param_of_input: Vec<Option<usize>>,
    params: Vec<(String, Tensor)>,
    state: Vec<Vec<Tensor>>,
    optimizer: Optimizer,
    loss: usize,
    step: u64,
    partition: Partition,
    /// The update graph (for `ladder dump`-style inspection and tests).
    pub update_graph: Graph,
    /// Seconds spent building and compiling.
    pub compile_seconds: f64,
}

impl Trainer {
    /// A trainer of `model`'s output `loss` (a float scalar) over the inputs named in
    /// `params`, starting from the given values; the model's other inputs are data, given at
    /// each [`Trainer::step`].
    pub fn new(
        model: &Graph,
        loss: &str,
        params: Vec<(String, Tensor)>,
        options: &TrainOptions,
    ) -> Result<Trainer, TrainError> {
        let start = Instant::now();
        let input_names: Vec<String> = (0..model.inputs().len()).map(|i| model.input_name(i)).collect();
        let mut param_of_input = vec![None; input_names.len()];
        for (p, (name, value)) in params.iter().enumerate() {
            let i = input_names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| TrainError::Input(format!("no input named `{name}` to train")))?;
            let ty = model.ty(model.inputs()[i]);
            check_type(name, ty, value)?;
            param_of_input[i] = Some(p);
        }
        let d = Differentiate { loss: loss.to_string(), wrt: params.iter().map(|(n, _)| n.clone()).collect() };
        let (joint, partition) = crate::pipeline::partition(model, Mode::Native, &d, &options.partition)?;
        let update_graph = update_graph(&partition.backward, &params, model, &options.optimizer)?;
        let forward = compile(&partition.forward, &options.compile)?;
        let update = compile(&update_graph, &options.compile)?;
        // Where each update input comes from.
        let forward_outputs: Vec<&str> = partition.forward.outputs().iter().map(|o| o.name.as_str()).collect();
        let states = options.optimizer.states();
        let mut sources = Vec::new();
        for k in 0..update_graph.inputs().len() {
            let name = update_graph.input_name(k);
            let source = if let Some(i) = input_names.iter().position(|n| *n == name) {
                Source::Model(i)
            } else if let Some(o) = forward_outputs.iter().position(|n| *n == name) {
                Source::Forward(o)
            } else if let Some(s) = options.optimizer.scalar_names().iter().position(|n| *n == name) {
                Source::Scalar(s)
            } else {
                let state = states.iter().enumerate().find_map(|(k, prefix)| {
                    let p = name.strip_prefix(prefix)?;
                    params.iter().position(|(n, _)| n == p).map(|p| Source::State { p, k })
                });
                state.ok_or_else(|| TrainError::Update(format!("the update reads `{name}`, which nothing provides")))?
            };
            sources.push(source);
        }
        let state = params
            .iter()
            .map(|(_, t)| states.iter().map(|_| zeros_like(t)).collect::<Result<Vec<_>, _>>())
            .collect::<Result<_, _>>()?;
        Ok(Trainer {
            forward,
            update,
            forward_out: Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() },
            update_out: Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() },
            sources,
            input_names,
            param_of_input,
            params,
            state,
            optimizer: options.optimizer,
            loss: joint.loss,
            step: 0,
            partition,
            update_graph,
            compile_seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// One step on `data` (every non-parameter input, by name): the loss before the update.
    /// Inputs are read where they lie (parameters, state, data and the saved values are not
    /// copied), and each plan writes into the previous step's output buffers; the new
    /// parameters and state swap places with the old, whose buffers the next update fills.
    pub fn step(&mut self, data: &[(&str, Tensor)]) -> Result<f64, TrainError> {
        let mut data_of_input: Vec<Option<&Tensor>> = Vec::with_capacity(self.input_names.len());
        for (i, name) in self.input_names.iter().enumerate() {
            data_of_input.push(match self.param_of_input[i] {
                Some(_) => None,
                None => Some(
                    data.iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, t)| t)
                        .ok_or_else(|| TrainError::Input(format!("no data for input `{name}`")))?,
                ),
            });
        }
        let model_input = |i: usize| -> &Tensor {
            match self.param_of_input[i] {
                Some(p) => &self.params[p].1,
                None => data_of_input[i].expect("every data input was found"),
            }
        };
        let views: Vec<TensorView> = (0..self.input_names.len()).map(|i| model_input(i).into()).collect();
        self.forward.run_views_into(&views, &mut self.forward_out)?;
        let fw = &self.forward_out.outputs;
        let loss = fw[self.loss].to_f64_vec().first().copied().unwrap_or(f64::NAN);
        let scalars = self.scalars()?;
        let views: Vec<TensorView> = self
            .sources
            .iter()
            .map(|s| match *s {
                Source::Model(i) => model_input(i).into(),
                Source::Forward(o) => (&fw[o]).into(),
                Source::State { p, k } => (&self.state[p][k]).into(),
                Source::Scalar(k) => (&scalars[k]).into(),
            })
            .collect();
        self.update.run_views_into(&views, &mut self.update_out)?;
        drop(views);
        self.step += 1;
        // Outputs: per parameter, its new value then its new states.
        let mut outputs = self.update_out.outputs.iter_mut();
        let short = || TrainError::Update("too few update outputs".into());
        for (p, (_, value)) in self.params.iter_mut().enumerate() {
            std::mem::swap(value, outputs.next().ok_or_else(short)?);
            for k in 0..self.state[p].len() {
                std::mem::swap(&mut self.state[p][k], outputs.next().ok_or_else(short)?);
            }
        }
        Ok(loss)
    }

    /// The optimizer's scalars for the next step (Adam's bias corrections), as f32 tensors.
    fn scalars(&self) -> Result<Vec<Tensor>, TrainError> {
        self.optimizer
            .scalars(self.step + 1)
            .into_iter()
            .map(|x| Tensor::from_f32(&[], vec![x as f32]))
            .collect::<Result<_, _>>()
            .map_err(|e| TrainError::Input(e.to_string()))
    }

    /// The parameters' current values.
    pub fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Times each step of the two plans a training step runs ([`Plan::profile`]): one
    /// ordinary step on `data` first (it updates the parameters, like [`Trainer::step`]),
    /// then `runs` runs of the forward plan and of the update plan (the backward and the
    /// optimizer) on that step's inputs, which leave the parameters as they are.
    pub fn profile(&mut self, data: &[(&str, Tensor)], runs: usize) -> Result<TrainProfile, TrainError> {
        let model_inputs: Vec<Tensor> = (0..self.input_names.len())
            .map(|i| match self.param_of_input[i] {
                Some(p) => Ok(self.params[p].1.clone()),
                None => data
                    .iter()
                    .find(|(n, _)| *n == self.input_names[i])
                    .map(|(_, t)| t.clone())
                    .ok_or_else(|| TrainError::Input(format!("no data for input `{}`", self.input_names[i]))),
            })
            .collect::<Result<_, _>>()?;
        let forward = self.forward.profile(&model_inputs, runs)?;
        let scalars = self.scalars()?;
        self.forward.run_views_into(&runtime_views(&model_inputs), &mut self.forward_out)?;
        let update_inputs: Vec<Tensor> = self
            .sources
            .iter()
            .map(|s| match *s {
                Source::Model(i) => model_inputs[i].clone(),
                Source::Forward(o) => self.forward_out.outputs[o].clone(),
                Source::State { p, k } => self.state[p][k].clone(),
                Source::Scalar(k) => scalars[k].clone(),
            })
            .collect();
        let update = self.update.profile(&update_inputs, runs)?;
        Ok(TrainProfile { forward, update })
    }

    /// The two compiled plans a step runs: the forward (the loss and the values saved for the
    /// backward), then the update (the backward and the optimizer).
    pub fn plans(&self) -> [&Plan; 2] {
        [&self.forward, &self.update]
    }

    /// The partition the step runs: what the backward reads (its report compares the
    /// policies).
    pub fn partition(&self) -> &Partition {
        &self.partition
    }
}

/// Per-step times of a training step's plans, from [`Trainer::profile`].
#[derive(Clone, Debug)]
pub struct TrainProfile {
    /// The forward plan (the loss and the values saved for the backward).
    pub forward: Vec<StepTime>,
    /// The update plan: the backward, then the optimizer's update.
    pub update: Vec<StepTime>,
}

fn runtime_views(inputs: &[Tensor]) -> Vec<TensorView<'_>> {
    inputs.iter().map(TensorView::from).collect()
}

fn check_type(name: &str, ty: &TensorType, t: &Tensor) -> Result<(), TrainError> {
    let shape = ty.shape.as_static();
    let fits =
        ty.dtype == t.dtype() && shape.is_some_and(|s| s.iter().map(|&d| d as usize).eq(t.shape().iter().copied()));
    if !fits {
        return Err(TrainError::Input(format!(
            "parameter `{name}` is {}{:?}, but the model's input is {ty} (parameters need static shapes)",
            t.dtype(),
            t.shape()
        )));
    }
    if !ty.dtype.is_float() {
        return Err(TrainError::Input(format!("parameter `{name}` is {}: only floats train", ty.dtype)));
    }
    Ok(())
}

fn zeros_like(t: &Tensor) -> Result<Tensor, TrainError> {
    Tensor::from_f64_as(t.dtype(), t.shape(), &vec![0.0; t.numel()]).map_err(|e| TrainError::Input(e.to_string()))
}

/// The backward graph with the optimizer's update after it: outputs, per parameter, its new
/// value then its new states; inputs, the backward's, then (where missing) the parameters,
/// then the states, then the scalars.
fn update_graph(
    backward: &Graph,
    params: &[(String, Tensor)],
    model: &Graph,
    optimizer: &Optimizer,
) -> Result<Graph, TrainError> {
    let mut g = backward.clone();
    g.name = format!("{}_update", model.name);
    let grads: Vec<Value> = g.outputs().iter().map(|o| o.value).collect();
    g.outputs.clear();
    let input = |g: &mut Graph, name: &str, ty: TensorType| -> Result<Value, TrainError> {
        let existing = (0..g.inputs().len()).find(|&i| g.input_name(i) == name).map(|i| g.inputs()[i]);
        match existing {
            Some(v) => Ok(v),
            None => Ok(g.add_input(name, ty)?),
        }
    };
    let mut param_values = Vec::with_capacity(params.len());
    for (name, _) in params {
        let i = (0..model.inputs().len())
            .find(|&i| model.input_name(i) == *name)
            .ok_or_else(|| TrainError::Input(name.clone()))?;
        param_values.push(input(&mut g, name, model.ty(model.inputs()[i]).clone())?);
    }
    let mut states = Vec::with_capacity(params.len());
    for ((name, _), &p) in params.iter().zip(&param_values) {
        let ty = g.ty(p).clone();
        let s: Vec<Value> = optimizer
            .states()
            .iter()
            .map(|prefix| input(&mut g, &format!("{prefix}{name}"), ty.clone()))
            .collect::<Result<_, _>>()?;
        states.push(s);
    }
    let scalar_ty = TensorType::new(DType::F32, Shape::from_static(&[]));
    let scalars: Vec<Value> =
        optimizer.scalar_names().iter().map(|n| input(&mut g, n, scalar_ty.clone())).collect::<Result<_, _>>()?;
    let mut outputs = Vec::new();
    {
        let mut e = Emitter { g: &mut g, keep: &[] };
        for (k, (name, _)) in params.iter().enumerate() {
            let (p, grad) = (param_values[k], grads[k]);
            let dtype = e.dtype(p);
            let scalar = |e: &mut Emitter, s: Value| if dtype == DType::F32 { Ok(s) } else { e.convert(s, dtype) };
            match *optimizer {
                Optimizer::Sgd { momentum, .. } => {
                    let lr = scalar(&mut e, scalars[0])?;
                    let dir = if momentum == 0.0 {
                        grad
                    } else {
                        let b = e.binary_scalar(OpKind::Mul, states[k][0], momentum)?;
                        e.add(b, grad)?
                    };
                    let step = e.mul(dir, lr)?;
                    let p2 = e.sub(p, step)?;
                    outputs.push((name.clone(), p2));
                    if momentum != 0.0 {
                        outputs.push((format!("b_{name}"), dir));
                    }
                }
                Optimizer::Adam { beta1, beta2, .. } => {
                    let (lr, eps) = (scalar(&mut e, scalars[0])?, scalar(&mut e, scalars[1])?);
                    let m = e.binary_scalar(OpKind::Mul, states[k][0], beta1)?;
                    let gm = e.binary_scalar(OpKind::Mul, grad, 1.0 - beta1)?;
                    let m = e.add(m, gm)?;
                    let v = e.binary_scalar(OpKind::Mul, states[k][1], beta2)?;
                    let g2 = e.mul(grad, grad)?;
                    let g2 = e.binary_scalar(OpKind::Mul, g2, 1.0 - beta2)?;
                    let v = e.add(v, g2)?;
                    let root = e.unary(OpKind::Sqrt, v)?;
                    let denom = e.add(root, eps)?;
                    let ratio = e.div(m, denom)?;
                    let step = e.mul(ratio, lr)?;
                    let p2 = e.sub(p, step)?;
                    outputs.push((name.clone(), p2));
                    outputs.push((format!("m_{name}"), m));
                    outputs.push((format!("v_{name}"), v));
                }
            }
        }
    }
    for (name, v) in outputs {
        g.add_output(&format!("{name}.new"), v)?;
    }
    crate::passes::eliminate_dead_code(&g).map_err(|e| TrainError::Update(e.to_string()))
}
