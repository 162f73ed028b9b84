//! Training (`ladder::train`): a compiled step (forward, backward, optimizer update) against
//! the interpreter's gradients and the optimizers' definitions computed here, the loss going
//! down on the built-in tasks, partition policies agreeing, and typed errors.

use ladder::autodiff::{grad, PartitionOptions, Policy};
use ladder::interp::{self, Options};
use ladder::train::models::{mlp, transformer, TransformerSize};
use ladder::train::{Optimizer, TrainError, TrainOptions, Trainer};
use ladder::Tensor;

fn options(optimizer: Optimizer, policy: Policy) -> TrainOptions {
    TrainOptions {
        optimizer,
        partition: PartitionOptions { policy, ..PartitionOptions::default() },
        ..TrainOptions::default()
    }
}

/// One step of each optimizer against its definition, from the interpreter's gradients.
#[test]
fn one_step_matches_the_optimizers_definition() {
    let optimizers = [
        Optimizer::Sgd { lr: 0.1, momentum: 0.0 },
        Optimizer::Sgd { lr: 0.1, momentum: 0.9 },
        Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8 },
    ];
    for optimizer in optimizers {
        let mut task = mlp(4, 6, 8, 3, 7);
        let params = task.params.clone();
        let mut trainer =
            Trainer::new(&task.graph, &task.loss, params.clone(), &options(optimizer, Policy::MinCut)).unwrap();
        let batch = task.batch();
        // The reference: the joint graph's gradients on the interpreter, the update in f64.
        let prims = ladder::passes::lower(&task.graph).unwrap().prims;
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        let joint = grad(&prims, "loss", &names).unwrap();
        let inputs: Vec<Tensor> = (0..task.graph.inputs().len())
            .map(|i| {
                let name = task.graph.input_name(i);
                let from_params = params.iter().find(|(n, _)| *n == name).map(|(_, t)| t.clone());
                from_params.unwrap_or_else(|| batch.iter().find(|(n, _)| *n == name).unwrap().1.clone())
            })
            .collect();
        let want = interp::run(&joint.graph, &inputs, &Options { precise: true, ..Options::default() }).unwrap();
        let loss = trainer.step(&batch).unwrap();
        assert!((loss - want.outputs[0].to_f64_vec()[0]).abs() <= 1e-5, "{optimizer:?}: loss {loss}");
        for (k, (name, before)) in params.iter().enumerate() {
            let g = want.outputs[joint.grad_output(k)].to_f64_vec();
            let expected: Vec<f64> = before
                .to_f64_vec()
                .iter()
                .zip(&g)
                .map(|(&p, &g)| match optimizer {
                    // The first step: the momentum buffer starts at zero, so it is `g`.
                    Optimizer::Sgd { lr, .. } => p - lr * g,
                    // The first step: m̂ = g, v̂ = g².
                    Optimizer::Adam { lr, eps, .. } => p - lr * g / (g.abs() + eps),
                })
                .collect();
            let got = trainer.params()[k].1.to_f64_vec();
            for (i, (e, o)) in expected.iter().zip(&got).enumerate() {
                assert!((e - o).abs() <= 1e-5 * (1.0 + e.abs()), "{optimizer:?} {name}[{i}]: expected {e}, got {o}");
            }
        }
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[test]
fn the_loss_goes_down_on_the_built_in_tasks() {
    for optimizer in [Optimizer::adam(3e-3), Optimizer::Sgd { lr: 0.1, momentum: 0.9 }] {
        let mut task = mlp(16, 8, 32, 4, 3);
        let params = std::mem::take(&mut task.params);
        let mut trainer = Trainer::new(&task.graph, &task.loss, params, &options(optimizer, Policy::MinCut)).unwrap();
        let losses: Vec<f64> = (0..80).map(|_| trainer.step(&task.batch()).unwrap()).collect();
        let (early, late) = (mean(&losses[..10]), mean(&losses[70..]));
        assert!(late < 0.5 * early, "{optimizer:?}: loss {early} early, {late} late");
    }
    let size = TransformerSize { layers: 2, d: 16, heads: 2, seq: 8, batch: 2 };
    let mut task = transformer(size, 5);
    let params = std::mem::take(&mut task.params);
    let mut trainer =
        Trainer::new(&task.graph, &task.loss, params, &options(Optimizer::adam(3e-3), Policy::MinCut)).unwrap();
    let losses: Vec<f64> = (0..40).map(|_| trainer.step(&task.batch()).unwrap()).collect();
    let (early, late) = (mean(&losses[..5]), mean(&losses[35..]));
    assert!(late < 0.7 * early, "transformer: loss {early} early, {late} late");
    // The cut saves less than saving everything.
    let r = &trainer.partition().report;
    assert!(r.chosen.saved_bytes < r.save_all.saved_bytes, "{r:?}");
}

#[test]
fn every_partition_trains_the_same() {
    let mut results = Vec::new();
    for policy in [Policy::MinCut, Policy::SaveAll, Policy::RecomputeAll] {
        let mut task = mlp(8, 6, 16, 3, 11);
        let params = std::mem::take(&mut task.params);
        let mut trainer =
            Trainer::new(&task.graph, &task.loss, params, &options(Optimizer::adam(1e-2), policy)).unwrap();
        for _ in 0..5 {
            trainer.step(&task.batch()).unwrap();
        }
        results.push(trainer.params().iter().flat_map(|(_, t)| t.to_f64_vec()).collect::<Vec<f64>>());
    }
    for other in &results[1..] {
        for (a, b) in results[0].iter().zip(other) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} against {b}");
        }
    }
}

#[test]
fn bad_parameters_and_data_are_typed_errors() {
    let mut task = mlp(4, 6, 8, 3, 7);
    let mut params = task.params.clone();
    params.push(("nope".into(), Tensor::from_f32(&[1], vec![0.0]).unwrap()));
    let e = Trainer::new(&task.graph, &task.loss, params, &TrainOptions::default()).err().unwrap();
    assert!(matches!(&e, TrainError::Input(m) if m.contains("`nope`")), "{e}");
    let mut params = task.params.clone();
    params[0].1 = Tensor::from_f32(&[2], vec![0.0, 0.0]).unwrap();
    let e = Trainer::new(&task.graph, &task.loss, params, &TrainOptions::default()).err().unwrap();
    assert!(matches!(&e, TrainError::Input(m) if m.contains("`w1`")), "{e}");
    let e = Trainer::new(&task.graph, "h", task.params.clone(), &TrainOptions::default()).err().unwrap();
    assert!(e.to_string().contains("`h`"), "{e}");
    let mut trainer = Trainer::new(&task.graph, &task.loss, task.params.clone(), &TrainOptions::default()).unwrap();
    let batch = task.batch();
    let e = trainer.step(&batch[..1]).err().unwrap();
    assert!(matches!(&e, TrainError::Input(m) if m.contains("`t`")), "{e}");
}
