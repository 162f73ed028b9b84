/*
 * ladder.h: the C API of ladder, a tensor-graph compiler and runtime.
 *
 * Load a model (ladder's text form, `.lad`, or ONNX, `.onnx`) into a session, which compiles it
 * for the CPU, then run it on tensors:
 *
 *     LadderSession* session = NULL;
 *     if (ladder_session_open("model.onnx", NULL, &session) != LADDER_OK)
 *         fprintf(stderr, "%s\n", ladder_last_error());
 *
 * Conventions, for every function below:
 *
 * - Errors. A function that can fail returns a LadderStatus: LADDER_OK, or a code saying what
 *   kind of failure it was; ladder_last_error() then gives a message naming what was wrong and
 *   where. Null pointers and arguments out of range are LADDER_ERR_INVALID_ARGUMENT, never
 *   undefined behaviour. A defect inside ladder is caught at this boundary and reported as
 *   LADDER_ERR_INTERNAL; the library never unwinds into C and never aborts on bad input. On
 *   failure, out-parameters are set to NULL (handles) and nothing is owned by the caller.
 * - Ownership. Handles (LadderSession*, LadderTensor*) are created by ladder_*_open/_new/_run and
 *   owned by the caller, who frees each exactly once with its ladder_*_free function (freeing
 *   NULL does nothing). Strings and arrays returned by accessors are owned by the handle they
 *   came from and stay valid until it is freed. The library never keeps a pointer the caller
 *   passed in beyond the call, except the callbacks and user data of ladder_register_op.
 * - Threads. A session is safe to use from several threads at once: ladder_session_run,
 *   ladder_session_run_into and the introspection functions may be called concurrently on one
 *   session (each run has its own working memory). ladder_session_free must not race with any
 *   other use of that session. Tensors are immutable after creation: reading one from several
 *   threads is safe; freeing it must not race with its use. ladder_last_error is per thread.
 * - Data. Tensor data is dense, row-major, in the machine's byte order; f16 and bf16 are their
 *   16-bit patterns, bool is one byte holding 0 or 1.
 */
#ifndef LADDER_H
#define LADDER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a call returned. Any value other than LADDER_OK is a failure, and ladder_last_error()
 * describes it. */
typedef enum LadderStatus {
    LADDER_OK = 0,
    /* A null pointer, a count or index out of range, data of the wrong size, an unknown enum
     * value. */
    LADDER_ERR_INVALID_ARGUMENT = 1,
    /* The model file could not be read, parsed or imported (missing file, malformed text or
     * ONNX, an operator ladder does not support). */
    LADDER_ERR_LOAD = 2,
    /* The model could not be compiled for the backend. */
    LADDER_ERR_COMPILE = 3,
    /* A run failed: the inputs do not fit the model (dtype, rank, sizes) or the computation
     * refused them. */
    LADDER_ERR_RUN = 4,
    /* Out of memory, or a size over one of ladder's limits (LadderOptions.untrusted). */
    LADDER_ERR_LIMIT = 5,
    /* A caller's output buffer is too small (ladder_session_run_into); nothing was written. */
    LADDER_ERR_BUFFER_TOO_SMALL = 6,
    /* A defect in ladder, caught at the API boundary. Please report it with the message. */
    LADDER_ERR_INTERNAL = 7
} LadderStatus;

/* Element types. LADDER_DTYPE_INVALID is what accessors return for a NULL tensor. */
typedef enum LadderDType {
    LADDER_DTYPE_INVALID = 0,
    LADDER_DTYPE_F32 = 1,
    LADDER_DTYPE_F64 = 2,
    LADDER_DTYPE_F16 = 3,
    LADDER_DTYPE_BF16 = 4,
    LADDER_DTYPE_I8 = 5,
    LADDER_DTYPE_I16 = 6,
    LADDER_DTYPE_I32 = 7,
    LADDER_DTYPE_I64 = 8,
    LADDER_DTYPE_U8 = 9,
    LADDER_DTYPE_U16 = 10,
    LADDER_DTYPE_U32 = 11,
    LADDER_DTYPE_U64 = 12,
    LADDER_DTYPE_BOOL = 13
} LadderDType;

/* Where a session's plans run. */
typedef enum LadderBackend {
    /* Native code: kernels compiled with Cranelift, library kernels for matmul, convolution,
     * softmax, norms and attention, split over threads. The default. */
    LADDER_BACKEND_NATIVE = 0,
    /* The reference executor: the same compiled program, every kernel run as specified on the
     * calling thread. Slow; for checking results. */
    LADDER_BACKEND_REFERENCE = 1,
    /* The reference interpreter on the model's graph, without compiling it. Slowest. */
    LADDER_BACKEND_INTERP = 2
} LadderBackend;

/* How a session is built. A zeroed struct (`LadderOptions o = {0};`) is the default, and so is
 * passing NULL where a `const LadderOptions*` is taken. */
typedef struct LadderOptions {
    /* Threads a run's work is split over: 0 for the machine's available threads, at most 4096. */
    size_t threads;
    /* A LadderBackend value. */
    int32_t backend;
    /* Nonzero: tight limits for models and inputs from people the caller does not control
     * (256 MiB of model data, 65536 nodes, 1 GiB per run, ...); a bound reached is
     * LADDER_ERR_LIMIT. Zero: limits that admit real models (16 GiB of data, 4 GiB per run). */
    int32_t untrusted;
} LadderOptions;

/* A loaded and compiled model. Opaque. */
typedef struct LadderSession LadderSession;

/* A dense tensor owned by the library. Opaque; immutable once made. */
typedef struct LadderTensor LadderTensor;

/* ---- Errors and version ------------------------------------------------------------------ */

/* The message of the calling thread's most recent failure: what was wrong and where, in
 * UTF-8. Never NULL ("" before any failure). The string is owned by the library and valid until
 * the next call into the library on the same thread. Thread-safe (each thread has its own). */
const char* ladder_last_error(void);

/* The library's version, "MAJOR.MINOR.PATCH". A static string; thread-safe. */
const char* ladder_version(void);

/* ---- Sessions ---------------------------------------------------------------------------- */

/* Loads the model at `path` (NUL-terminated; `.lad` text or `.onnx`, by extension, else by
 * content) and compiles it with `options` (NULL: the defaults). A model whose dims are symbolic
 * (batch, sequence) is compiled once for every size when it can be, else for each new input
 * shape on first use.
 *
 * On success *out is a new session, which the caller frees with ladder_session_free. On failure
 * *out is NULL: LADDER_ERR_INVALID_ARGUMENT (a NULL `path` or `out`, a bad option),
 * LADDER_ERR_LOAD (unreadable, malformed or unsupported model), LADDER_ERR_COMPILE,
 * LADDER_ERR_LIMIT. Thread-safe (sessions are independent). */
LadderStatus ladder_session_open(const char* path, const LadderOptions* options, LadderSession** out);

/* Frees a session and everything it owns (its names and dims). NULL does nothing. Must not
 * race with another call on the same session. Tensors it returned stay valid. */
void ladder_session_free(LadderSession* session);

/* The number of inputs (outputs) the model declares; 0 for a NULL session. Thread-safe. */
size_t ladder_session_input_count(const LadderSession* session);
size_t ladder_session_output_count(const LadderSession* session);

/* The name of input (output) `index`, NUL-terminated UTF-8, owned by the session and valid
 * until it is freed. NULL for a NULL session or an index out of range (ladder_last_error
 * says which). Thread-safe. */
const char* ladder_session_input_name(const LadderSession* session, size_t index);
const char* ladder_session_output_name(const LadderSession* session, size_t index);

/* The declared type of input `index`: its dtype, its rank, and its dims (an array of `rank`
 * sizes owned by the session, valid until it is freed; a symbolic dim such as a batch size is
 * -1). Any of `dtype`, `rank`, `dims` may be NULL when not wanted. LADDER_ERR_INVALID_ARGUMENT
 * for a NULL session or an index out of range. Thread-safe. */
LadderStatus ladder_session_input_type(const LadderSession* session, size_t index, LadderDType* dtype, size_t* rank,
                                       const int64_t** dims);

/* Runs the model. `inputs` holds `n_inputs` tensors, one per declared input in order (the
 * library reads them and keeps no reference). `outputs` has room for `n_outputs` handles, which
 * must equal ladder_session_output_count; on success outputs[k] is a new tensor holding output
 * k, which the caller frees with ladder_tensor_free. On failure every outputs[k] is NULL:
 * LADDER_ERR_INVALID_ARGUMENT (NULL pointers, wrong counts), LADDER_ERR_RUN (an input's dtype,
 * rank or sizes do not fit the model), LADDER_ERR_COMPILE (a plan for these shapes could not be
 * compiled), LADDER_ERR_LIMIT. Thread-safe: several threads may run one session at once. */
LadderStatus ladder_session_run(const LadderSession* session, const LadderTensor* const* inputs, size_t n_inputs,
                                LadderTensor** outputs, size_t n_outputs);

/* Runs the model and copies output k into the caller's buffer out_data[k] of out_bytes[k]
 * bytes (no tensor handles to free). `n_outputs` must equal ladder_session_output_count.
 * `out_written` (NULL if not wanted) receives the byte size of each output, also when the call
 * fails with LADDER_ERR_BUFFER_TOO_SMALL, so that the caller can size its buffers and call again;
 * in that case the message names the first output that did not fit and the bytes it needs, and
 * no buffer was written. out_data[k] may be NULL only where out_bytes[k] is 0. The output's
 * shape is the model's (query it with ladder_session_run where it depends on the inputs).
 * Errors as ladder_session_run. Thread-safe, as long as no two calls write the same buffer. */
LadderStatus ladder_session_run_into(const LadderSession* session, const LadderTensor* const* inputs, size_t n_inputs,
                                     void* const* out_data, const size_t* out_bytes, size_t* out_written,
                                     size_t n_outputs);

/* ---- Tensors ----------------------------------------------------------------------------- */

/* A new tensor of `dtype` and shape `shape[0..rank)` (each dim >= 0; `shape` may be NULL when
 * `rank` is 0, a scalar), holding a copy of the `data_bytes` bytes at `data`, which must be
 * exactly the product of the dims times the dtype's size (`data` may be NULL when that is 0).
 * The caller keeps ownership of `shape` and `data`. On success *out is a new tensor, which the
 * caller frees with ladder_tensor_free. On failure *out is NULL: LADDER_ERR_INVALID_ARGUMENT
 * (NULL pointers, an unknown dtype, a negative dim, a size that overflows, a byte count that is
 * not the shape's, a bool byte other than 0 or 1), LADDER_ERR_LIMIT (no memory for the copy).
 * Thread-safe. */
LadderStatus ladder_tensor_new(LadderDType dtype, const int64_t* shape, size_t rank, const void* data,
                               size_t data_bytes, LadderTensor** out);

/* Frees a tensor. NULL does nothing. Must not race with another use of the same tensor. */
void ladder_tensor_free(LadderTensor* tensor);

/* The tensor's dtype; LADDER_DTYPE_INVALID for NULL. Thread-safe. */
LadderDType ladder_tensor_dtype(const LadderTensor* tensor);

/* The tensor's rank (number of dims); 0 for NULL. Thread-safe. */
size_t ladder_tensor_rank(const LadderTensor* tensor);

/* The tensor's dims: an array of ladder_tensor_rank() sizes owned by the tensor, valid until it
 * is freed; NULL for a NULL tensor (a scalar's is a valid pointer to no dims). Thread-safe. */
const int64_t* ladder_tensor_shape(const LadderTensor* tensor);

/* The tensor's elements (see Data above), ladder_tensor_byte_size() bytes owned by the tensor,
 * aligned for its dtype, valid until it is freed; NULL for a NULL tensor. Thread-safe. */
const void* ladder_tensor_data(const LadderTensor* tensor);

/* The size of the tensor's data in bytes; 0 for NULL. Thread-safe. */
size_t ladder_tensor_byte_size(const LadderTensor* tensor);

/* ---- Custom kernels ---------------------------------------------------------------------- */

/* A custom op's shape rule: the result type of the op for operands of these types. The
 * operands are `n_inputs` entries of `input_dtypes`, `input_ranks` and `input_dims` (each an
 * array of its rank's dims; a symbolic dim, such as a batch size, is -1), all owned by the
 * library and valid during the call. `attrs` is the node's attributes as text
 * ("alpha:f=0.5;axes:is=1,2;mode:s=clip": name, kind i/f/is/fs/s, value; "" for none), owned
 * by the library. The callback writes the result's dtype, rank (at most 16) and dims into
 * `out_dims` (room for 16); a result dim of -1 is the first operand's dim on that axis
 * (symbolic or not). It returns LADDER_OK, or any other status to reject the operands (the
 * model then fails to load, naming the op). */
typedef LadderStatus (*LadderShapeFn)(void* user_data, const char* attrs, size_t n_inputs,
                                      const LadderDType* input_dtypes, const size_t* input_ranks,
                                      const int64_t* const* input_dims, LadderDType* out_dtype, size_t* out_rank,
                                      int64_t* out_dims);

/* A custom op's computation. `inputs` holds `n_inputs` tensors, borrowed for the call (read
 * them with ladder_tensor_dtype/_shape/_data; never free them). The callback makes its result
 * with ladder_tensor_new and stores it in *output, which hands it to the library (the library
 * frees it, also when the status is not LADDER_OK). The result must have the dtype and shape
 * the shape rule gave for these operands, else the run fails naming the op. It returns
 * LADDER_OK, or any other status to fail the run (LADDER_ERR_RUN, naming the op). */
typedef LadderStatus (*LadderComputeFn)(void* user_data, const char* attrs, const LadderTensor* const* inputs,
                                        size_t n_inputs, LadderTensor** output);

/* Registers a custom operator for the whole process: a model using it, an ONNX node of op
 * type `name` in `domain` (a custom domain such as "com.example"; NULL or "" for an op only
 * ladder's text form names, `custom(%x) {name="NAME"}`), then loads and runs in every session
 * (native and reference plans run it as one library call between compiled kernels). Register
 * before opening a session on such a model. The library keeps `shape_fn`, `compute_fn` and
 * `user_data` for the rest of the process and calls the callbacks from whatever threads run
 * models, several at once: `user_data` must be safe to share. The callbacks must not unwind
 * (C++ exceptions, Rust panics). LADDER_ERR_INVALID_ARGUMENT: NULL `name` or callback, a name
 * that is not letters, digits, `_`, `.` and `-`, the default domain ("ai.onnx"), or a name
 * registered already. Thread-safe. */
LadderStatus ladder_register_op(const char* domain, const char* name, LadderShapeFn shape_fn,
                                LadderComputeFn compute_fn, void* user_data);

#ifdef __cplusplus
}
#endif

#endif /* LADDER_H */
