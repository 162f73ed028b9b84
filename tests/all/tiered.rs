//! Tiered start-up (`Session::new_tiered`): the first calls run on the reference interpreter's
//! plan while the native plan compiles on a thread of its own, later calls on the native plan.
//! A kernel compiler that holds every compile until the test releases it makes "before the
//! native plan exists" deterministic; one that panics makes the background compile fail. Both
//! tiers are checked against the reference interpreter within ONNX's tolerance
//! (`conformance::compare`), the corpus model also against onnxruntime's outputs. Nothing here
//! depends on how long anything takes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use ladder::backend::cpu::jit::{CraneliftCompiler, KernelCompiler, NativeKernel};
use ladder::backend::cpu::CpuOptions;
use ladder::backend::Declined;
use ladder::frontend::onnx::conformance::compare;
use ladder::frontend::onnx::{decode, decode_tensor, tensor_from_proto, Budget, ImportOptions};
use ladder::kernel::{Kernel, Program};
use ladder::models::{example_encoder, random_tensor, Rng};
use ladder::session::Tier;
use ladder::{BackendKind, CompileOptions, DType, Model, Session, Tensor};

/// Cranelift behind a gate: every kernel compile waits until [`Gated::release`]. Each kernel
/// it compiles holds a clone of `live`, so that its count says whether a plan is alive.
struct Gated {
    inner: Arc<dyn KernelCompiler>,
    live: Arc<()>,
    /// (released, compiles entered)
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl Gated {
    fn new() -> Arc<Gated> {
        let inner = CraneliftCompiler::shared(CpuOptions::default()).unwrap();
        Arc::new(Gated { inner, live: Arc::new(()), state: Mutex::new((false, 0)), changed: Condvar::new() })
    }

    fn release(&self) {
        self.state.lock().unwrap().0 = true;
        self.changed.notify_all();
    }

    /// Blocks until a compile is waiting at the gate (or went through it).
    fn wait_entered(&self) {
        let mut state = self.state.lock().unwrap();
        while state.1 == 0 {
            state = self.changed.wait(state).unwrap();
        }
    }
}

impl KernelCompiler for Gated {
    fn compile(&self, kernel: &Kernel, program: &Program) -> Result<NativeKernel, Declined> {
        let mut state = self.state.lock().unwrap();
        state.1 += 1;
        self.changed.notify_all();
        while !state.0 {
            state = self.changed.wait(state).unwrap();
        }
        drop(state);
        let mut native = self.inner.compile(kernel, program)?;
        native.owner = Arc::new((native.owner, Arc::clone(&self.live)));
        Ok(native)
    }
}

/// A kernel compiler that panics: the background compile fails.
struct Panics;

impl KernelCompiler for Panics {
    fn compile(&self, _: &Kernel, _: &Program) -> Result<NativeKernel, Declined> {
        panic!("this kernel compiler always panics")
    }
}

/// Native CPU options (one thread: kernels compile on the compiling thread) with `compiler`.
fn native_with(compiler: Arc<dyn KernelCompiler>) -> CompileOptions {
    CompileOptions { kernel_compiler: Some(compiler), ..CompileOptions::native_cpu(1).unwrap() }
}

fn interp() -> CompileOptions {
    CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() }
}

fn encoder() -> Model {
    Model::from_graph(example_encoder().unwrap())
}

/// Encoder inputs of a few sequence lengths, each with the reference interpreter's outputs.
fn encoder_cases() -> Vec<(Tensor, Vec<Tensor>)> {
    let oracle = Session::new(encoder(), interp()).unwrap();
    (0..4)
        .map(|k| {
            let x = random_tensor(&mut Rng::new(40 + k as u64), DType::F32, &[1, 1 + 5 * k, 32]).unwrap();
            let want = oracle.run(std::slice::from_ref(&x)).unwrap().outputs;
            (x, want)
        })
        .collect()
}

/// Why `got` differs from `want` beyond the tolerance, if it does.
fn mismatch(got: &[Tensor], want: &[Tensor]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    got.iter().zip(want).enumerate().find_map(|(k, (g, w))| compare(g, w).map(|why| format!("output {k}: {why}")))
}

/// The backend and native kernel count of the plan `session` runs `x` on.
fn plan_kind(session: &Session, x: &Tensor) -> (BackendKind, usize) {
    let plan = session.plan_for(std::slice::from_ref(x)).unwrap();
    (plan.backend(), plan.native_kernels())
}

#[test]
fn first_results_come_from_the_reference_plan_then_from_the_native_one() {
    let cases = encoder_cases();
    let gate = Gated::new();
    let s = Session::new_tiered(encoder(), native_with(gate.clone())).unwrap();
    // The native compile cannot finish before the gate opens.
    assert_eq!(s.tier(), Tier::Reference);
    for (x, want) in &cases {
        assert_eq!(plan_kind(&s, x), (BackendKind::Interp, 0));
        let got = s.run(std::slice::from_ref(x)).unwrap().outputs;
        assert_eq!(mismatch(&got, want), None, "reference tier, {:?}", x.shape());
    }
    assert_eq!(s.general_plan().unwrap().backend(), BackendKind::Interp);
    gate.release();
    assert_eq!(s.wait_native(), Tier::Native);
    assert_eq!(s.tier(), Tier::Native);
    let plan = s.general_plan().unwrap();
    assert!(plan.backend() == BackendKind::Cpu && plan.native_kernels() > 0);
    for (x, want) in &cases {
        assert_eq!(plan_kind(&s, x).0, BackendKind::Cpu);
        let got = s.run(std::slice::from_ref(x)).unwrap().outputs;
        assert_eq!(mismatch(&got, want), None, "native tier, {:?}", x.shape());
    }
    // The reference plan and the native one.
    assert_eq!(s.compilations(), 2);
}

#[test]
fn a_session_that_is_not_tiered_reports_the_native_tier() {
    let (x, want) = encoder_cases().swap_remove(1);
    let plain = Session::new(encoder(), CompileOptions::native_cpu(1).unwrap()).unwrap();
    assert_eq!((plain.tier(), plain.wait_native()), (Tier::Native, Tier::Native));
    // Interpreter options: nothing to tier up to.
    let s = Session::new_tiered(encoder(), interp()).unwrap();
    assert_eq!((s.tier(), s.compilations()), (Tier::Native, 1));
    assert_eq!(mismatch(&s.run(std::slice::from_ref(&x)).unwrap().outputs, &want), None);
}

#[test]
fn eight_threads_get_correct_results_while_the_native_plan_swaps_in() {
    const THREADS: usize = 8;
    let cases = encoder_cases();
    let gate = Gated::new();
    let s = Session::new_tiered(encoder(), native_with(gate.clone())).unwrap();
    let started = AtomicUsize::new(0);
    let (runs, after_swap): (Vec<usize>, Vec<usize>) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, cases, started) = (&s, &cases, &started);
                scope.spawn(move || {
                    let (mut runs, mut after_swap) = (0usize, 0usize);
                    // Until three runs after this thread saw the native tier (the slot
                    // never empties, so those three are native).
                    while after_swap < 3 {
                        let native_before = s.tier() == Tier::Native;
                        let (x, want) = &cases[(t + runs) % cases.len()];
                        let got = s.run(std::slice::from_ref(x)).unwrap().outputs;
                        if let Some(why) = mismatch(&got, want) {
                            panic!("thread {t}, run {runs} ({:?}): {why}", x.shape());
                        }
                        runs += 1;
                        if runs == 1 {
                            started.fetch_add(1, Ordering::SeqCst);
                        }
                        after_swap += usize::from(native_before);
                    }
                    (runs, after_swap)
                })
            })
            .collect();
        // Every thread has a result from the reference tier before the native plan can exist.
        while started.load(Ordering::SeqCst) < THREADS {
            std::thread::yield_now();
        }
        let tier_before = s.tier();
        gate.release();
        assert_eq!(tier_before, Tier::Reference);
        workers.into_iter().map(|w| w.join().unwrap()).unzip()
    });
    assert_eq!(s.tier(), Tier::Native);
    assert!(after_swap.iter().all(|&n| n == 3), "{after_swap:?}");
    assert!(runs.iter().all(|&n| n >= 4), "{runs:?}");
}

#[test]
fn a_failed_native_compile_is_reported_and_the_session_keeps_serving() {
    let cases = encoder_cases();
    let s = Session::new_tiered(encoder(), native_with(Arc::new(Panics))).unwrap();
    let (x, want) = &cases[2];
    assert_eq!(mismatch(&s.run(std::slice::from_ref(x)).unwrap().outputs, want), None);
    let tier = s.wait_native();
    let Tier::Failed(why) = &tier else { panic!("the native compile cannot succeed, got {tier:?}") };
    assert!(why.contains("panicked") && why.contains("always panics"), "{why}");
    assert_eq!(s.tier(), tier);
    for (x, want) in &cases {
        assert_eq!(plan_kind(&s, x), (BackendKind::Interp, 0));
        assert_eq!(mismatch(&s.run(std::slice::from_ref(x)).unwrap().outputs, want), None, "{:?}", x.shape());
    }
}

#[test]
fn a_session_dropped_mid_compile_lets_its_compile_finish_and_frees_it() {
    let gate = Gated::new();
    let held_before = Arc::strong_count(&gate);
    let s = Session::new_tiered(encoder(), native_with(gate.clone())).unwrap();
    gate.wait_entered();
    assert_eq!(s.tier(), Tier::Reference);
    drop(s);
    // The drop did not wait for the compile: its thread still holds the compiler.
    assert!(Arc::strong_count(&gate) > held_before, "the compile thread is gone before its compile ended");
    gate.release();
    // The thread finishes, then drops its options (which hold the compiler) and the plan it
    // compiled (whose kernels hold `live`); a leak would stop here, reported after a
    // generous bound.
    let mut waited = 0;
    while Arc::strong_count(&gate) > held_before || Arc::strong_count(&gate.live) > 1 {
        assert!(waited < 600_000, "the compile thread still holds the compiler after 10 minutes");
        std::thread::sleep(std::time::Duration::from_millis(1));
        waited += 1;
    }
}

fn corpus_case(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus").join(name)
}

fn onnx_model(case: &Path) -> Model {
    let bytes = std::fs::read(case.join("model.onnx")).unwrap();
    let model = decode(&bytes, &ImportOptions::default()).unwrap();
    Model::from_onnx(model, Some(case.to_path_buf()), ImportOptions::default())
}

/// `prefix_0.pb`, `prefix_1.pb`, ... of a data set, by name.
fn read_set(set: &Path, prefix: &str) -> Vec<(String, Tensor)> {
    (0..)
        .map(|i| set.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.is_file())
        .map(|p| {
            let t = decode_tensor(&std::fs::read(p).unwrap(), &ImportOptions::default()).unwrap();
            let tensor = tensor_from_proto(&t, &ImportOptions::default(), None, &mut Budget::default()).unwrap();
            (t.name.clone(), tensor)
        })
        .collect()
}

/// A corpus model's first data set: its inputs in the session's order, onnxruntime's outputs.
fn corpus_set(case: &Path, s: &Session) -> (Vec<Tensor>, Vec<Tensor>) {
    let set = case.join("test_data_set_0");
    let given = read_set(&set, "input");
    let inputs = s.inputs().iter().map(|(name, _)| given.iter().find(|(n, _)| n == name).unwrap().1.clone()).collect();
    (inputs, read_set(&set, "output").into_iter().map(|(_, t)| t).collect())
}

#[test]
fn a_corpus_model_agrees_on_both_tiers_with_onnxruntime_and_the_plain_session() {
    let case = corpus_case("bert_ts");
    let gate = Gated::new();
    let s = Session::new_tiered(onnx_model(&case), native_with(gate.clone())).unwrap();
    let (inputs, want) = corpus_set(&case, &s);
    let plain = Session::new(onnx_model(&case), CompileOptions::native_cpu(1).unwrap()).unwrap();
    let plain_out = plain.run(&inputs).unwrap().outputs;
    assert_eq!(s.tier(), Tier::Reference);
    let reference = s.run(&inputs).unwrap().outputs;
    gate.release();
    assert_eq!(s.wait_native(), Tier::Native);
    let native = s.run(&inputs).unwrap().outputs;
    for (tier, got) in [("reference", &reference), ("native", &native)] {
        assert_eq!(mismatch(got, &want), None, "{tier} tier against onnxruntime");
        assert_eq!(mismatch(got, &plain_out), None, "{tier} tier against the plain session");
    }
}

#[test]
fn a_model_compiled_per_call_is_not_tiered() {
    // The voice model branches on its sample rate: no general plan, so each call compiles
    // natively, as in a session that is not tiered.
    let case = corpus_case("vad_ts");
    let s = Session::new_tiered(onnx_model(&case), CompileOptions::native_cpu(1).unwrap()).unwrap();
    assert!(s.general_plan().is_none() && s.specialized_because().is_some());
    assert_eq!(s.tier(), Tier::Native);
    let (inputs, want) = corpus_set(&case, &s);
    assert_eq!(s.plan_for(&inputs).unwrap().backend(), BackendKind::Cpu);
    assert_eq!(mismatch(&s.run(&inputs).unwrap().outputs, &want), None);
}

#[test]
fn an_artifact_starts_on_the_reference_tier_too() {
    use ladder::artifact::Artifact;
    use ladder::pipeline::Mode;
    let cases = encoder_cases();
    let artifact = Artifact::lower(&example_encoder().unwrap(), Mode::Native, "encoder").unwrap();
    let gate = Gated::new();
    let s = Session::new_tiered(Model::from_artifact(artifact), native_with(gate.clone())).unwrap();
    let (x, want) = &cases[3];
    assert_eq!(plan_kind(&s, x), (BackendKind::Interp, 0));
    assert_eq!(mismatch(&s.run(std::slice::from_ref(x)).unwrap().outputs, want), None, "reference tier");
    gate.release();
    assert_eq!(s.wait_native(), Tier::Native);
    assert_eq!(plan_kind(&s, x).0, BackendKind::Cpu);
    assert_eq!(mismatch(&s.run(std::slice::from_ref(x)).unwrap().outputs, want), None, "native tier");
}
