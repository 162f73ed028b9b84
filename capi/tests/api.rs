//! The C API called through its Rust symbols, as C would call it: raw pointers in, status
//! codes and out-parameters back.
//!
//! Results are compared bit for bit with `engine::Session` run directly on the same model and
//! inputs (the API must add nothing and lose nothing); every kind of bad call (null pointers,
//! wrong counts, dtypes, byte lengths, small buffers, missing and malformed files) must give
//! its code and a message naming what was wrong; and one session shared by 8 threads must give
//! every thread the single-threaded answer.

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};

use engine::{CompileOptions, Model, Session, Tensor};
use ladder::*;

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

const MLP: &str = "tests/onnx_fixtures/mlp/model.onnx";

fn last_error() -> String {
    // SAFETY: ladder_last_error never returns NULL and its string lives until the next call.
    unsafe { CStr::from_ptr(ladder_last_error()) }.to_string_lossy().into_owned()
}

/// Asserts `status` is `expected` and the thread's message mentions every one of `words`.
#[track_caller]
fn assert_error(status: LadderStatus, expected: LadderStatus, words: &[&str]) {
    let message = last_error();
    assert_eq!(status, expected, "status {status:?}, expected {expected:?}; message: {message}");
    for w in words {
        assert!(message.contains(w), "the message `{message}` does not mention `{w}`");
    }
}

/// A session handle freed on drop.
struct Handle(*mut LadderSession);

impl Handle {
    fn open(path: &str, options: Option<&LadderOptions>) -> Result<Handle, (LadderStatus, String)> {
        let c = CString::new(path).unwrap();
        let mut out = null_mut();
        // SAFETY: a NUL-terminated path, options NULL or a live struct, `out` writable.
        let status = unsafe { ladder_session_open(c.as_ptr(), options.map_or(null(), |o| o as *const _), &mut out) };
        if status == LADDER_OK {
            assert!(!out.is_null());
            Ok(Handle(out))
        } else {
            assert!(out.is_null(), "a failed open left a handle");
            Err((status, last_error()))
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a live handle, freed once.
        unsafe { ladder_session_free(self.0) };
    }
}

// SAFETY: the API documents a session as safe to share between threads.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// A tensor handle freed on drop.
struct CTensor(*mut LadderTensor);

impl CTensor {
    fn new(dtype: LadderDType, shape: &[i64], bytes: &[u8]) -> Result<CTensor, LadderStatus> {
        let mut out = null_mut();
        // SAFETY: `shape` and `bytes` are live slices of the lengths given.
        let status = unsafe {
            ladder_tensor_new(dtype, shape.as_ptr(), shape.len(), bytes.as_ptr().cast(), bytes.len(), &mut out)
        };
        if status == LADDER_OK {
            Ok(CTensor(out))
        } else {
            assert!(out.is_null());
            Err(status)
        }
    }

    fn f32(shape: &[i64], values: &[f32]) -> CTensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        CTensor::new(LADDER_DTYPE_F32, shape, &bytes).expect("a valid f32 tensor")
    }

    /// The tensor's shape and bytes, read through the accessors.
    fn read(&self) -> (LadderDType, Vec<i64>, Vec<u8>) {
        // SAFETY: a live handle; the shape and data pointers cover rank and byte_size.
        unsafe {
            let rank = ladder_tensor_rank(self.0);
            let shape = std::slice::from_raw_parts(ladder_tensor_shape(self.0), rank).to_vec();
            let n = ladder_tensor_byte_size(self.0);
            let data = ladder_tensor_data(self.0).cast::<u8>();
            let bytes = if n == 0 { Vec::new() } else { std::slice::from_raw_parts(data, n).to_vec() };
            (ladder_tensor_dtype(self.0), shape, bytes)
        }
    }
}

impl Drop for CTensor {
    fn drop(&mut self) {
        // SAFETY: a live handle, freed once.
        unsafe { ladder_tensor_free(self.0) };
    }
}

/// Deterministic f32 values, varied in sign and size.
fn values(n: usize, salt: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + salt * 3) % 23) as f32 / 8.0 - 1.3).collect()
}

/// Runs `session` on `inputs` through `ladder_session_run`; the outputs or the status.
fn run(session: &Handle, inputs: &[&CTensor]) -> Result<Vec<CTensor>, LadderStatus> {
    let ptrs: Vec<*const LadderTensor> = inputs.iter().map(|t| t.0 as *const _).collect();
    // SAFETY: a live session.
    let n_outputs = unsafe { ladder_session_output_count(session.0) };
    let mut outs = vec![null_mut(); n_outputs];
    // SAFETY: `ptrs` holds live handles, `outs` has n_outputs slots.
    let status = unsafe { ladder_session_run(session.0, ptrs.as_ptr(), ptrs.len(), outs.as_mut_ptr(), outs.len()) };
    if status != LADDER_OK {
        assert!(outs.iter().all(|p| p.is_null()), "a failed run left outputs");
        return Err(status);
    }
    Ok(outs.into_iter().map(CTensor).collect())
}

/// The same outputs from `engine::Session` directly: dtype, shape, bytes.
fn expected(session: &Session, inputs: &[Tensor]) -> Vec<(LadderDType, Vec<i64>, Vec<u8>)> {
    let outputs = session.run(inputs).expect("the direct run").outputs;
    outputs
        .iter()
        .map(|t| {
            let bytes: Vec<u8> = match t.data() {
                engine::TensorData::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
                other => panic!("an f32 output expected, got {:?}", other.dtype()),
            };
            (LadderDType::from_dtype(t.dtype()), t.shape().iter().map(|&d| d as i64).collect(), bytes)
        })
        .collect()
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The built-in example encoder written as a `.lad` file (what `ladder run` runs with no model).
fn encoder_file() -> tempfile_path::TempPath {
    let g = engine::models::example_encoder().expect("the example encoder");
    tempfile_path::TempPath::write("encoder.lad", engine::text::print(&g).as_bytes())
}

/// A file in the system's temporary folder, removed on drop (no tempfile crate needed).
mod tempfile_path {
    pub struct TempPath(pub String);

    impl TempPath {
        pub fn write(name: &str, bytes: &[u8]) -> TempPath {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("ladder-capi-{}-{n}-{name}", std::process::id()));
            std::fs::write(&path, bytes).expect("a temporary file");
            TempPath(path.display().to_string())
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn the_example_encoder_runs_as_the_rust_session_runs_it_bit_for_bit() {
    let file = encoder_file();
    let session = Handle::open(&file.0, None).expect("the encoder opens");
    // SAFETY: a live session; out-parameters are locals.
    unsafe {
        assert_eq!(ladder_session_input_count(session.0), 1);
        assert_eq!(CStr::from_ptr(ladder_session_input_name(session.0, 0)).to_str().unwrap(), "x");
        let (mut dtype, mut rank, mut dims) = (LADDER_DTYPE_INVALID, 0usize, null());
        assert_eq!(ladder_session_input_type(session.0, 0, &mut dtype, &mut rank, &mut dims), LADDER_OK);
        assert_eq!((dtype, std::slice::from_raw_parts(dims, rank)), (LADDER_DTYPE_F32, &[1, -1, 32][..]));
    }
    let g = engine::models::example_encoder().unwrap();
    let names: Vec<String> = g.outputs().iter().map(|o| o.name.clone()).collect();
    let direct = Session::new(Model::from_graph(g), CompileOptions::native_cpu(threads()).unwrap()).unwrap();
    for seq in [1usize, 5, 17] {
        let x = values(seq * 32, seq);
        let outputs = run(&session, &[&CTensor::f32(&[1, seq as i64, 32], &x)]).expect("the encoder runs");
        let want = expected(&direct, &[Tensor::from_f32(&[1, seq, 32], x).unwrap()]);
        assert_eq!(outputs.len(), want.len());
        for (k, (got, want)) in outputs.iter().map(CTensor::read).zip(want).enumerate() {
            assert!(got == want, "seq {seq}: output {k} differs from Session::run");
        }
        // SAFETY: a live session.
        let first = unsafe { CStr::from_ptr(ladder_session_output_name(session.0, 0)) };
        assert_eq!(first.to_str().unwrap(), names[0]);
    }
}

#[test]
fn an_onnx_model_runs_and_run_into_writes_the_same_bytes() {
    let session = Handle::open(&repo(MLP), None).expect("the MLP opens");
    let direct = Session::new(ladder_model(MLP), CompileOptions::native_cpu(threads()).unwrap()).unwrap();
    let x = values(3 * 8, 1);
    let outputs = run(&session, &[&CTensor::f32(&[3, 8], &x)]).expect("the MLP runs");
    let want = expected(&direct, &[Tensor::from_f32(&[3, 8], x.clone()).unwrap()]);
    let got = outputs[0].read();
    assert!(got == want[0], "the MLP's output differs from Session::run: {got:?} vs {:?}", want[0]);
    assert_eq!(got.1, [3, 4]);

    // The caller-owned variant: exactly the bytes, and the size written back.
    let input = CTensor::f32(&[3, 8], &x);
    let inputs = [input.0 as *const LadderTensor];
    let mut buffer = vec![0u8; 64];
    let (data, bytes, mut written) = ([buffer.as_mut_ptr().cast::<c_void>()], [buffer.len()], [0usize]);
    // SAFETY: live handles; one output buffer of `bytes[0]` bytes.
    let status = unsafe {
        ladder_session_run_into(session.0, inputs.as_ptr(), 1, data.as_ptr(), bytes.as_ptr(), written.as_mut_ptr(), 1)
    };
    assert_eq!(status, LADDER_OK, "{}", last_error());
    assert_eq!(written[0], 48);
    assert_eq!(&buffer[..48], &want[0].2[..]);
    assert!(buffer[48..].iter().all(|&b| b == 0), "run_into wrote past the output");
}

fn ladder_model(path: &str) -> Model {
    engine::load(repo(path)).expect("the model loads")
}

#[test]
fn every_backend_agrees_on_the_mlp() {
    let x = values(2 * 8, 4);
    let mut results = Vec::new();
    for backend in [LADDER_BACKEND_NATIVE, LADDER_BACKEND_REFERENCE, LADDER_BACKEND_INTERP] {
        let options = LadderOptions { threads: 1, backend: backend.0, untrusted: 1 };
        let session = Handle::open(&repo(MLP), Some(&options)).expect("the MLP opens");
        let out = run(&session, &[&CTensor::f32(&[2, 8], &x)]).expect("the MLP runs");
        let (_, shape, bytes) = out[0].read();
        assert_eq!(shape, [2, 4]);
        results.push(bytes.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect::<Vec<f32>>());
    }
    for other in &results[1..] {
        for (a, b) in results[0].iter().zip(other) {
            assert!((a - b).abs() <= 1e-5, "backends disagree: {:?} vs {other:?}", results[0]);
        }
    }
}

#[test]
fn null_pointers_are_invalid_arguments() {
    let mut session = null_mut();
    let mut tensor = null_mut();
    let path = CString::new(repo(MLP)).unwrap();
    // SAFETY: every pointer is NULL or live; NULLs are what is tested.
    unsafe {
        let s = ladder_session_open(null(), null(), &mut session);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["ladder_session_open", "`path` is NULL"]);
        let s = ladder_session_open(path.as_ptr(), null(), null_mut());
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["`out` is NULL"]);
        let s = ladder_tensor_new(LADDER_DTYPE_F32, null(), 1, null(), 0, &mut tensor);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["ladder_tensor_new", "`shape` is NULL", "rank"]);
        let s = ladder_tensor_new(LADDER_DTYPE_F32, [2i64].as_ptr(), 1, null(), 8, &mut tensor);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["`data` is NULL", "8"]);
        let s = ladder_tensor_new(LADDER_DTYPE_F32, null(), 0, [0u8; 4].as_ptr().cast(), 4, null_mut());
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["`out` is NULL"]);
        let mut outs = [null_mut()];
        let s = ladder_session_run(null(), null(), 0, outs.as_mut_ptr(), 1);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["ladder_session_run", "session is NULL"]);
        // Accessors answer 0 or NULL for a NULL handle, and say so.
        assert_eq!(ladder_tensor_rank(null()), 0);
        assert!(last_error().contains("ladder_tensor_rank: the tensor is NULL"));
        assert_eq!(ladder_tensor_dtype(null()), LADDER_DTYPE_INVALID);
        assert!(ladder_tensor_shape(null()).is_null() && ladder_tensor_data(null()).is_null());
        assert_eq!(ladder_tensor_byte_size(null()), 0);
        assert_eq!(ladder_session_input_count(null()), 0);
        assert!(ladder_session_output_name(null(), 0).is_null());
        assert_error(
            ladder_session_input_type(null(), 0, null_mut(), null_mut(), null_mut()),
            LADDER_ERR_INVALID_ARGUMENT,
            &["session is NULL"],
        );
        // Freeing NULL does nothing.
        ladder_session_free(null_mut());
        ladder_tensor_free(null_mut());
    }
    let session = Handle::open(&repo(MLP), None).unwrap();
    let x = CTensor::f32(&[2, 8], &values(16, 0));
    // SAFETY: live handles, NULL where tested.
    unsafe {
        let inputs = [x.0 as *const LadderTensor];
        let s = ladder_session_run(session.0, inputs.as_ptr(), 1, null_mut(), 1);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["`outputs` is NULL"]);
        let mut outs = [null_mut()];
        let s = ladder_session_run(session.0, [null()].as_ptr(), 1, outs.as_mut_ptr(), 1);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["input 0 (`x`)", "tensor is NULL"]);
        let s =
            ladder_session_run_into(session.0, inputs.as_ptr(), 1, [null_mut()].as_ptr(), [32].as_ptr(), null_mut(), 1);
        assert_error(s, LADDER_ERR_INVALID_ARGUMENT, &["out_data[0] is NULL", "out_bytes[0] is 32"]);
        assert!(ladder_session_input_name(session.0, 1).is_null());
        assert!(last_error().contains("index 1 is out of range (the model has 1 inputs)"), "{}", last_error());
    }
}

#[test]
fn bad_runs_name_what_was_wrong() {
    let session = Handle::open(&repo(MLP), None).unwrap();
    let x = CTensor::f32(&[2, 8], &values(16, 0));
    // Wrong input count.
    let status = run(&session, &[&x, &x]).err().unwrap();
    assert_error(status, LADDER_ERR_INVALID_ARGUMENT, &["n_inputs is 2", "the model has 1 inputs"]);
    // Wrong output count.
    let mut outs = [null_mut(); 2];
    // SAFETY: live handles; two output slots.
    let status = unsafe { ladder_session_run(session.0, [x.0 as *const _].as_ptr(), 1, outs.as_mut_ptr(), 2) };
    assert_error(status, LADDER_ERR_INVALID_ARGUMENT, &["n_outputs is 2", "the model has 1 outputs"]);
    // Wrong dtype.
    let ints = CTensor::new(LADDER_DTYPE_I64, &[2, 8], &[0u8; 128]).unwrap();
    assert_error(run(&session, &[&ints]).err().unwrap(), LADDER_ERR_RUN, &["`x`", "f32", "i64"]);
    // Wrong static dim.
    let wide = CTensor::f32(&[2, 9], &values(18, 0));
    assert_error(run(&session, &[&wide]).err().unwrap(), LADDER_ERR_RUN, &["`x`", "[2, 9]"]);
    // A run over the untrusted memory limit.
    let big = tempfile_path::TempPath::write(
        "big.lad",
        b"graph big(%x: f32[1]) {\n  %h = full() {shape=[65536, 65536], value=1.0}\n  %y = mul(%h, %x)\n  return %y\n}\n",
    );
    let options = LadderOptions { untrusted: 1, ..LadderOptions::default() };
    let big_session = Handle::open(&big.0, Some(&options)).expect("the graph compiles");
    let one = CTensor::f32(&[1], &[1.0]);
    assert_error(run(&big_session, &[&one]).err().unwrap(), LADDER_ERR_LIMIT, &["max_run_bytes"]);
}

#[test]
fn a_small_caller_buffer_is_reported_with_the_size_needed_and_left_unwritten() {
    let session = Handle::open(&repo(MLP), None).unwrap();
    let x = CTensor::f32(&[3, 8], &values(24, 2));
    let mut buffer = vec![0xabu8; 40];
    let mut written = [0usize];
    // SAFETY: live handles; a 40-byte buffer where 48 are needed.
    let status = unsafe {
        ladder_session_run_into(
            session.0,
            [x.0 as *const _].as_ptr(),
            1,
            [buffer.as_mut_ptr().cast::<c_void>()].as_ptr(),
            [buffer.len()].as_ptr(),
            written.as_mut_ptr(),
            1,
        )
    };
    assert_error(status, LADDER_ERR_BUFFER_TOO_SMALL, &["output 0 (`y`", "needs 48 bytes", "out_bytes[0] is 40"]);
    assert_eq!(written[0], 48, "the size needed is written back");
    assert!(buffer.iter().all(|&b| b == 0xab), "a too-small buffer was written");
}

#[test]
fn bad_tensors_are_refused_before_anything_is_allocated() {
    let f = |dtype, shape: &[i64], bytes: &[u8]| CTensor::new(dtype, shape, bytes).err().unwrap();
    assert_error(
        f(LADDER_DTYPE_F32, &[2, 3], &[0; 20]),
        LADDER_ERR_INVALID_ARGUMENT,
        &["data_bytes is 20", "needs 24"],
    );
    assert_error(f(LADDER_DTYPE_F32, &[2, -3], &[]), LADDER_ERR_INVALID_ARGUMENT, &["dim 1 is -3"]);
    assert_error(f(LadderDType(99), &[1], &[0]), LADDER_ERR_INVALID_ARGUMENT, &["dtype 99"]);
    assert_error(f(LADDER_DTYPE_BOOL, &[3], &[0, 1, 2]), LADDER_ERR_INVALID_ARGUMENT, &["bool element 2 is 2"]);
    // Sizes whose product or byte count overflows are errors, not allocations.
    let huge = i64::MAX;
    assert_error(f(LADDER_DTYPE_U8, &[huge, huge], &[]), LADDER_ERR_INVALID_ARGUMENT, &["more elements than"]);
    assert_error(f(LADDER_DTYPE_F64, &[huge], &[]), LADDER_ERR_INVALID_ARGUMENT, &["more bytes than"]);
    // Every dtype round-trips its bytes; a scalar has rank 0; an empty tensor has no bytes.
    for (dtype, size) in [
        (LADDER_DTYPE_F32, 4),
        (LADDER_DTYPE_F64, 8),
        (LADDER_DTYPE_F16, 2),
        (LADDER_DTYPE_BF16, 2),
        (LADDER_DTYPE_I8, 1),
        (LADDER_DTYPE_I16, 2),
        (LADDER_DTYPE_I32, 4),
        (LADDER_DTYPE_I64, 8),
        (LADDER_DTYPE_U8, 1),
        (LADDER_DTYPE_U16, 2),
        (LADDER_DTYPE_U32, 4),
        (LADDER_DTYPE_U64, 8),
        (LADDER_DTYPE_BOOL, 1),
    ] {
        // Unaligned on purpose: the copy must not assume the caller's alignment.
        let storage: Vec<u8> = (0..=3 * size).map(|i| (i % 2) as u8).collect();
        let bytes = &storage[1..];
        let t = CTensor::new(dtype, &[3], bytes).expect("a valid tensor");
        assert_eq!(t.read(), (dtype, vec![3], bytes.to_vec()));
        let scalar = CTensor::new(dtype, &[], &bytes[..size]).unwrap();
        assert_eq!(scalar.read().1, Vec::<i64>::new());
        let empty = CTensor::new(dtype, &[0, 4], &[]).unwrap();
        assert_eq!(empty.read(), (dtype, vec![0, 4], Vec::new()));
    }
}

#[test]
fn missing_and_malformed_model_files_are_load_errors() {
    let (status, message) = Handle::open("/nonexistent/model.onnx", None).err().unwrap();
    assert_eq!(status, LADDER_ERR_LOAD);
    assert!(message.contains("/nonexistent/model.onnx"), "{message}");
    let (status, message) = Handle::open(&repo("tests/onnx_hostile/garbage.onnx"), None).err().unwrap();
    assert_eq!(status, LADDER_ERR_LOAD);
    assert!(message.contains("garbage.onnx") && message.contains("not a valid ONNX protobuf"), "{message}");
    let (status, message) = Handle::open(&repo("tests/onnx_hostile/unsupported_ops.onnx"), None).err().unwrap();
    assert_eq!(status, LADDER_ERR_LOAD);
    assert!(message.contains("Unique"), "{message}");
    let text =
        tempfile_path::TempPath::write("bad.lad", b"graph g(%x: f32[2]) {\n  %y = nosuchop(%x)\n  return %y\n}\n");
    let (status, message) = Handle::open(&text.0, None).err().unwrap();
    assert_eq!(status, LADDER_ERR_LOAD);
    assert!(message.contains("bad.lad:2:") && message.contains("nosuchop"), "{message}");
    let options = LadderOptions { backend: 7, ..LadderOptions::default() };
    let (status, message) = Handle::open(&repo(MLP), Some(&options)).err().unwrap();
    assert_eq!(status, LADDER_ERR_INVALID_ARGUMENT);
    assert!(message.contains("options.backend is 7"), "{message}");
    let options = LadderOptions { threads: MAX_THREADS + 1, ..LadderOptions::default() };
    assert_eq!(Handle::open(&repo(MLP), Some(&options)).err().unwrap().0, LADDER_ERR_INVALID_ARGUMENT);
}

#[test]
fn eight_threads_running_one_session_get_the_single_threaded_outputs() {
    let file = encoder_file();
    let session = Handle::open(&file.0, None).unwrap();
    let seqs = [3usize, 8, 13];
    let single: Vec<Vec<u8>> = seqs
        .iter()
        .map(|&seq| {
            let out = run(&session, &[&CTensor::f32(&[1, seq as i64, 32], &values(seq * 32, seq))]).unwrap();
            out[0].read().2
        })
        .collect();
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (session, single) = (&session, &single);
            scope.spawn(move || {
                for round in 0..6 {
                    let i = (thread + round) % seqs.len();
                    let seq = seqs[i];
                    let x = CTensor::f32(&[1, seq as i64, 32], &values(seq * 32, seq));
                    let out = run(session, &[&x]).unwrap_or_else(|s| panic!("thread {thread}: {s:?} {}", last_error()));
                    assert!(out[0].read().2 == single[i], "thread {thread}, seq {seq}: a different output");
                }
            });
        }
    });
}

#[test]
fn the_last_error_belongs_to_its_thread() {
    let (status, _) = Handle::open("/nonexistent/a.lad", None).err().unwrap();
    assert_eq!(status, LADDER_ERR_LOAD);
    std::thread::spawn(|| {
        assert_eq!(last_error(), "", "a new thread starts without an error");
        let _ = Handle::open("/nonexistent/b.lad", None);
        assert!(last_error().contains("b.lad"));
    })
    .join()
    .unwrap();
    assert!(last_error().contains("a.lad"), "another thread's failure replaced this thread's message");
}

#[test]
fn the_version_is_the_crates() {
    // SAFETY: a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(ladder_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}
