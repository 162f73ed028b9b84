//! The training workloads of `ladder bench --train`: one step (forward, backward, Adam) of
//! the built-in tasks of `ladder train` (`crate::train::models`), timed like the W workloads,
//! with the bytes the partitioner saves between the passes against saving everything. The
//! peer is `tools/bench_train_torch.py` (PyTorch eager on the same transformer and task).

use crate::autodiff::{PartitionOptions, Policy};
use crate::runtime::CompileOptions;
use crate::tensor::Tensor;
use crate::train::models::{mlp, transformer, Task, TransformerSize};
use crate::train::{Optimizer, TrainOptions, TrainProfile, Trainer};

use super::memory::CountingAlloc;
use super::{time, BenchError, Timing};

/// The training workloads, in order.
pub const TRAIN_WORKLOADS: &[&str] = &["T1_train_mlp_64x256x512x10", "T2_train_transformer_2x128_s64_b8"];

/// One training workload at one thread count.
#[derive(Clone, Debug)]
pub struct TrainMeasurement {
    pub workload: String,
    pub threads: usize,
    pub timing: Timing,
    /// Building the step: lowering, autodiff, partition, compiling both plans.
    pub compile_ms: f64,
    /// Bytes saved between forward and backward by the minimum cut, by saving everything
    /// the backward reads, and by recomputing everything recomputable.
    pub saved_bytes: u64,
    pub save_all_bytes: u64,
    pub recompute_all_bytes: u64,
    /// The heap's high-water mark during one warm step above what was live before it (the
    /// saved values, the plans' scratch, new parameters and state), when counted.
    pub peak_bytes: Option<usize>,
    /// Loss at the first and the last step timed (it should fall).
    pub first_loss: f64,
    pub last_loss: f64,
}

impl TrainMeasurement {
    #[cfg(feature = "cli")]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "workload": self.workload,
            "threads": self.threads,
            "median_us": self.timing.median_us,
            "min_us": self.timing.min_us,
            "runs": self.timing.runs,
            "compile_ms": self.compile_ms,
            "saved_bytes": self.saved_bytes,
            "save_all_bytes": self.save_all_bytes,
            "recompute_all_bytes": self.recompute_all_bytes,
            "peak_bytes": self.peak_bytes,
            "first_loss": self.first_loss,
            "last_loss": self.last_loss,
        })
    }
}

/// The training workloads whose names start with one of `prefixes` (all when empty).
pub fn select_train(prefixes: &[String]) -> Result<Vec<&'static str>, BenchError> {
    if prefixes.is_empty() {
        return Ok(TRAIN_WORKLOADS.to_vec());
    }
    let mut out = Vec::new();
    for p in prefixes {
        let found: Vec<&str> = TRAIN_WORKLOADS.iter().copied().filter(|w| w.starts_with(p.as_str())).collect();
        if found.is_empty() {
            return Err(BenchError::NoMatch(p.clone()));
        }
        out.extend(found.into_iter().filter(|w| !out.contains(w)).collect::<Vec<_>>());
    }
    Ok(out)
}

fn task_of(name: &str) -> Result<Task, BenchError> {
    match name {
        "T1_train_mlp_64x256x512x10" => Ok(mlp(64, 256, 512, 10, 1)),
        "T2_train_transformer_2x128_s64_b8" => Ok(transformer(TransformerSize::default(), 1)),
        other => Err(BenchError::NoMatch(other.to_string())),
    }
}

/// Workload `name`'s task and its trainer (Adam, the minimum cut) at `threads` threads,
/// with the milliseconds building the trainer took.
fn trainer_of(name: &str, threads: usize) -> Result<(Task, Trainer, f64), BenchError> {
    let mut task = task_of(name)?;
    let options = TrainOptions {
        optimizer: Optimizer::adam(3e-3),
        partition: PartitionOptions { policy: Policy::MinCut, ..PartitionOptions::default() },
        compile: CompileOptions { threads, ..CompileOptions::default() },
    };
    let params = std::mem::take(&mut task.params);
    let start = std::time::Instant::now();
    let trainer =
        Trainer::new(&task.graph, &task.loss, params, &options).map_err(|e| BenchError::Backend(e.to_string()))?;
    Ok((task, trainer, start.elapsed().as_secs_f64() * 1e3))
}

/// The median time of every step of workload `name`'s two plans (forward; backward and
/// Adam) at `threads` threads, over `runs` runs ([`Trainer::profile`]).
pub fn profile_train(name: &str, threads: usize, runs: usize) -> Result<TrainProfile, BenchError> {
    let (mut task, mut trainer, _) = trainer_of(name, threads)?;
    let batch = task.batch();
    trainer.profile(&batch, runs).map_err(|e| BenchError::Run(e.to_string()))
}

/// Times one step of workload `name` with Adam at `threads` threads.
pub fn time_train(name: &str, threads: usize, runs: Option<usize>) -> Result<TrainMeasurement, BenchError> {
    let (mut task, mut trainer, compile_ms) = trainer_of(name, threads)?;
    // Batches drawn ahead, so the timing holds only the step.
    let batches: Vec<Vec<(&'static str, Tensor)>> = (0..16).map(|_| task.batch()).collect();
    let mut k = 0;
    let mut losses = Vec::new();
    let mut step = |losses: &mut Vec<f64>| -> Result<(), String> {
        let loss = trainer.step(&batches[k % batches.len()]).map_err(|e| e.to_string())?;
        losses.push(loss);
        k += 1;
        Ok(())
    };
    let timing = time(runs, || step(&mut losses)).map_err(BenchError::Run)?;
    let peak_bytes = CountingAlloc::installed().then(|| {
        let before = CountingAlloc::reset_peak();
        let _ = step(&mut losses);
        CountingAlloc::peak().saturating_sub(before)
    });
    let r = trainer.partition().report.clone();
    Ok(TrainMeasurement {
        workload: name.to_string(),
        threads,
        timing,
        compile_ms,
        saved_bytes: r.chosen.saved_bytes,
        save_all_bytes: r.save_all.saved_bytes,
        recompute_all_bytes: r.recompute_all.saved_bytes,
        peak_bytes,
        first_loss: losses.first().copied().unwrap_or(f64::NAN),
        last_loss: losses.last().copied().unwrap_or(f64::NAN),
    })
}
