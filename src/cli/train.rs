//! `ladder train`: a built-in model trained on synthetic data, one line per epoch.

use std::io::Write;
use std::time::Instant;

use ladder::autodiff::{PartitionOptions, Policy};
use ladder::train::models::{task, TASKS};
use ladder::train::{Optimizer, TrainOptions, Trainer};

use super::{machine_threads, Error};

#[derive(clap::Args, Debug)]
#[command(after_help = "Example: ladder train --task transformer --epochs 3 --steps 10")]
pub struct TrainArgs {
    /// The model and its synthetic task: `mlp` (linear, gelu, linear; regression onto a random
    /// teacher) or `transformer` (2 pre-norm blocks, d 128, 4 heads, seq 64, batch 8;
    /// regression onto a random linear map of the input).
    #[arg(long, default_value = "mlp", value_parser = TASKS)]
    pub task: String,
    /// `adam` or `sgd`.
    #[arg(long, default_value = "adam", value_parser = ["adam", "sgd"])]
    pub optimizer: String,
    /// Learning rate [default: 0.003 for adam, 0.1 for sgd].
    #[arg(long)]
    pub lr: Option<f64>,
    /// SGD's momentum.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f64,
    /// Epochs: each is --steps batches and prints one line (mean loss, time per step).
    #[arg(long, default_value_t = 5)]
    pub epochs: u64,
    /// Steps (batches) per epoch.
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// What the backward recomputes instead of saving (see `ladder dump --stage backward`).
    #[arg(long, value_name = "POLICY", default_value = "min-cut", value_parser = Policy::NAMES)]
    pub partition: String,
    /// Threads for the CPU backend [default: the machine's available threads].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seed of the initial parameters and the data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn train(args: &TrainArgs, out: &mut dyn Write) -> Result<(), Error> {
    let mut t = task(&args.task, args.seed).ok_or_else(|| Error::Arguments(format!("no task `{}`", args.task)))?;
    let optimizer = match args.optimizer.as_str() {
        "sgd" => Optimizer::Sgd { lr: args.lr.unwrap_or(0.1), momentum: args.momentum },
        _ => Optimizer::adam(args.lr.unwrap_or(3e-3)),
    };
    let mut options = TrainOptions {
        optimizer,
        partition: PartitionOptions {
            policy: Policy::from_name(&args.partition).unwrap_or_default(),
            ..PartitionOptions::default()
        },
        ..TrainOptions::default()
    };
    options.compile.threads = args.threads.unwrap_or_else(machine_threads).max(1);
    let params = std::mem::take(&mut t.params);
    let count: usize = params.iter().map(|(_, p)| p.numel()).sum();
    let mut trainer = Trainer::new(&t.graph, &t.loss, params, &options)
        .map_err(|e| Error::Usage(format!("cannot build the training step: {e}")))?;
    let r = &trainer.partition().report;
    let w = |out: &mut dyn Write, line: String| writeln!(out, "{line}").map_err(Error::Stdout);
    w(
        out,
        format!(
            "{}: {count} parameters, {} on {} thread(s); compiled in {:.2} s",
            args.task, args.optimizer, options.compile.threads, trainer.compile_seconds
        ),
    )?;
    w(
        out,
        format!(
            "saved between forward and backward ({}): {} bytes in {} values (save-all: {} bytes; recompute-all: {} bytes)",
            args.partition, r.chosen.saved_bytes, r.chosen.saved_values, r.save_all.saved_bytes, r.recompute_all.saved_bytes
        ),
    )?;
    let mut first = None;
    let mut last = f64::NAN;
    for epoch in 1..=args.epochs {
        // The steps alone are timed: making the synthetic batch is the host's work.
        let mut stepping = std::time::Duration::ZERO;
        let mut sum = 0.0;
        for _ in 0..args.steps {
            let batch = t.batch();
            let start = Instant::now();
            let loss = trainer.step(&batch).map_err(|e| Error::Usage(format!("step {}: {e}", trainer.steps() + 1)))?;
            stepping += start.elapsed();
            first.get_or_insert(loss);
            sum += loss;
            last = loss;
        }
        let ms = stepping.as_secs_f64() * 1e3 / args.steps.max(1) as f64;
        let mean = sum / args.steps.max(1) as f64;
        w(
            out,
            format!("epoch {epoch}/{}: loss {mean:.6} (mean of {} steps), {ms:.2} ms/step", args.epochs, args.steps),
        )?;
    }
    if let Some(first) = first {
        w(out, format!("loss {first:.6} at the first step, {last:.6} at the last"))?;
    }
    Ok(())
}
