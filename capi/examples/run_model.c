/*
 * run_model: load a model with ladder's C API, run it once on deterministic inputs, print what
 * came out.
 *
 *     run_model [MODEL]    (default: tests/onnx_fixtures/mlp/model.onnx, a two-layer MLP)
 *
 * Every symbolic dim (a batch size) is taken as 2. Element i of every input is
 * ((i * 7) % 13 - 6) / 4, exact in every float dtype (integer dtypes: (i * 7) % 13; bool:
 * i % 2), so that capi/run_example.sh can feed the same values to `ladder run` and compare.
 * Output lines are `output NAME DTYPE [DIMS]: V0 V1 ...` (at most 16 values, 9 significant
 * digits, enough to read an f32 back exactly).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ladder.h"

#define MAX_INPUTS 16

/* Prints the failed call and the library's message, returns 1. */
static int fail(const char* what, LadderStatus status) {
    fprintf(stderr, "run_model: %s failed (status %d): %s\n", what, (int)status, ladder_last_error());
    return 1;
}

/* The value of element i (see above), in the dtype's own bytes at dst. Returns 0 for a dtype
 * this example does not generate. */
static int fill(LadderDType dtype, size_t i, unsigned char* dst) {
    double v = (double)((long)((i * 7) % 13) - 6) / 4.0;
    long n = (long)((i * 7) % 13);
    switch (dtype) {
    case LADDER_DTYPE_F32: *(float*)dst = (float)v; return 1;
    case LADDER_DTYPE_F64: *(double*)dst = v; return 1;
    case LADDER_DTYPE_I32: *(int32_t*)dst = (int32_t)n; return 1;
    case LADDER_DTYPE_I64: *(int64_t*)dst = (int64_t)n; return 1;
    case LADDER_DTYPE_BOOL: *dst = (unsigned char)(i % 2); return 1;
    default: return 0;
    }
}

static size_t dtype_size(LadderDType dtype) {
    switch (dtype) {
    case LADDER_DTYPE_F64: case LADDER_DTYPE_I64: case LADDER_DTYPE_U64: return 8;
    case LADDER_DTYPE_F32: case LADDER_DTYPE_I32: case LADDER_DTYPE_U32: return 4;
    case LADDER_DTYPE_F16: case LADDER_DTYPE_BF16: case LADDER_DTYPE_I16: case LADDER_DTYPE_U16: return 2;
    default: return 1;
    }
}

static const char* dtype_name(LadderDType dtype) {
    switch (dtype) {
    case LADDER_DTYPE_F32: return "f32";
    case LADDER_DTYPE_F64: return "f64";
    case LADDER_DTYPE_I32: return "i32";
    case LADDER_DTYPE_I64: return "i64";
    case LADDER_DTYPE_BOOL: return "bool";
    default: return "other";
    }
}

static void print_dims(const int64_t* dims, size_t rank) {
    printf("[");
    for (size_t d = 0; d < rank; d++) printf("%s%lld", d ? ", " : "", (long long)dims[d]);
    printf("]");
}

/* Prints one output tensor: its name, dtype, shape and first values. */
static void print_output(const char* name, const LadderTensor* t) {
    LadderDType dtype = ladder_tensor_dtype(t);
    size_t count = ladder_tensor_byte_size(t) / dtype_size(dtype);
    const unsigned char* data = ladder_tensor_data(t);
    printf("output %s %s ", name, dtype_name(dtype));
    print_dims(ladder_tensor_shape(t), ladder_tensor_rank(t));
    printf(":");
    for (size_t i = 0; i < count && i < 16; i++) {
        switch (dtype) {
        case LADDER_DTYPE_F32: printf(" %.9g", ((const float*)data)[i]); break;
        case LADDER_DTYPE_F64: printf(" %.17g", ((const double*)data)[i]); break;
        case LADDER_DTYPE_I32: printf(" %d", ((const int32_t*)data)[i]); break;
        case LADDER_DTYPE_I64: printf(" %lld", (long long)((const int64_t*)data)[i]); break;
        case LADDER_DTYPE_BOOL: printf(" %d", data[i]); break;
        default: printf(" ?"); break;
        }
    }
    printf("\n");
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "tests/onnx_fixtures/mlp/model.onnx";
    int rc = 1;
    LadderSession* session = NULL;
    LadderTensor* inputs[MAX_INPUTS] = {0};
    LadderTensor** outputs = NULL;
    size_t n_inputs = 0, n_outputs = 0;

    LadderOptions options = {0}; /* the defaults: native code over the machine's threads */
    LadderStatus status = ladder_session_open(path, &options, &session);
    if (status != LADDER_OK) return fail("ladder_session_open", status);
    printf("ladder %s, model %s\n", ladder_version(), path);

    /* One input tensor per declared input, symbolic dims (-1) taken as 2. */
    n_inputs = ladder_session_input_count(session);
    if (n_inputs > MAX_INPUTS) {
        fprintf(stderr, "run_model: the model has %zu inputs, more than %d\n", n_inputs, MAX_INPUTS);
        goto done;
    }
    for (size_t k = 0; k < n_inputs; k++) {
        LadderDType dtype;
        size_t rank;
        const int64_t* declared;
        status = ladder_session_input_type(session, k, &dtype, &rank, &declared);
        if (status != LADDER_OK) { fail("ladder_session_input_type", status); goto done; }
        int64_t dims[8];
        if (rank > 8) { fprintf(stderr, "run_model: input %zu has rank %zu\n", k, rank); goto done; }
        size_t count = 1;
        for (size_t d = 0; d < rank; d++) {
            dims[d] = declared[d] < 0 ? 2 : declared[d];
            count *= (size_t)dims[d];
        }
        unsigned char* data = malloc(count * dtype_size(dtype) + 1);
        if (!data) { fprintf(stderr, "run_model: out of memory\n"); goto done; }
        for (size_t i = 0; i < count; i++) {
            if (!fill(dtype, i, data + i * dtype_size(dtype))) {
                fprintf(stderr, "run_model: input %zu: dtype %d is not generated by this example\n", k, (int)dtype);
                free(data);
                goto done;
            }
        }
        status = ladder_tensor_new(dtype, dims, rank, data, count * dtype_size(dtype), &inputs[k]);
        free(data); /* the tensor holds its own copy */
        if (status != LADDER_OK) { fail("ladder_tensor_new", status); goto done; }
        printf("input %s %s ", ladder_session_input_name(session, k), dtype_name(dtype));
        print_dims(dims, rank);
        printf("\n");
    }

    /* Run: the library allocates each output; the caller frees them. */
    n_outputs = ladder_session_output_count(session);
    outputs = calloc(n_outputs ? n_outputs : 1, sizeof *outputs);
    if (!outputs) { fprintf(stderr, "run_model: out of memory\n"); goto done; }
    status = ladder_session_run(session, (const LadderTensor* const*)inputs, n_inputs, outputs, n_outputs);
    if (status != LADDER_OK) { fail("ladder_session_run", status); goto done; }
    for (size_t k = 0; k < n_outputs; k++) print_output(ladder_session_output_name(session, k), outputs[k]);
    rc = 0;

done:
    for (size_t k = 0; k < n_outputs && outputs; k++) ladder_tensor_free(outputs[k]);
    free(outputs);
    for (size_t k = 0; k < n_inputs && k < MAX_INPUTS; k++) ladder_tensor_free(inputs[k]);
    ladder_session_free(session);
    return rc;
}
