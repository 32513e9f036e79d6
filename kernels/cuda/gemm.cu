/* gemm: linear forward and backward through cuBLASLt (semantics in ../kernels.h) in the compute
 * dtype, every product computed transposed so that no matrix is copied. */
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

// Row-major to column-major: cuBLASLt reads matrices column-major, and a row-major X[r, c]
// (leading dimension c) is, byte for byte, the column-major X^T [c, r] with ld c. So every
// product is computed transposed, with no copies:
//
//   forward  out[M,N] = in[M,K] w[N,K]^T  <=>  out^T[N,M] = w . in^T
//            A = w   as col-major [K,N] ld K, op T   -> [N,K]
//            B = in  as col-major [K,M] ld K, op N   -> [K,M]
//            D = out as col-major [N,M] ld N (m = N, n = M, k = K); beta 0
//            b[N] through CUBLASLT_EPILOGUE_BIAS: a vector as long as D's rows (N), added to
//            every column of D, i.e. to every row of the row-major out.
//   din      din[M,K] = dout[M,N] w[N,K]  <=>  din^T[K,M] = w^T . dout^T
//            A = w    as col-major [K,N] ld K, op N
//            B = dout as col-major [N,M] ld N, op N
//            D = din  as col-major [K,M] ld K (m = K, n = M, k = N); beta 0
//   dw       dw[N,K] += dout^T in  <=>  dw^T[K,N] += in^T . dout
//            A = in   as col-major [K,M] ld K, op N
//            B = dout as col-major [N,M] ld N, op T  -> [M,N]
//            C = D = dw as col-major [K,N] ld K (m = K, n = N, k = M); beta 1 (accumulates)
//   db       db[N] += column sums of dout: a small deterministic kernel below. cuBLASLt's
//            BGRADB epilogue would fuse it into dw's GEMM, but it stores the bias gradient
//            (overwrites) where kernels.h asks for +=.
//
// Types. Every GEMM computes in CUBLAS_COMPUTE_32F with fp32 alpha and beta (scale type
// CUDA_R_32F); A and B are the compute dtype t's (CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F). forward and
// din write D in t (C = D), so a bf16 or fp16 output is the fp32 accumulator rounded once; dw's C
// and D are fp32 (dw is float * in every dtype, and beta = 1 adds into it in fp32). Both are rows
// of cuBLASLt's table of supported types for cublasLtMatmul (COMPUTE_32F, scale 32F: A/B 16BF
// with C/D 16BF or 32F, A/B 16F with C/D 16F or 32F); PyTorch's bf16 x bf16 -> fp32 GEMM runs
// through the same combination. forward's bias is t's, the type cuBLASLt gives a bias by default
// (D's; cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), set explicitly here; the epilogue adds
// it to the fp32 accumulator before D's one rounding. fp32 may use TF32 tensor cores
// (kernels_cuda_allow_tf32: CUBLAS_COMPUTE_32F_FAST_TF32); bf16 and fp16 run on the tensor cores
// at COMPUTE_32F by themselves.
//
// cuBLASLt objects live in a small per-thread table (each rank thread has its own context, so
// no locks), keyed by shape, op, dtype, TF32 and the alignment of every pointer; the descriptors
// are initialised in place (cublasLt*Init, no allocation) and the heuristic's algorithm is kept, so
// a shape met again costs one cublasLtMatmul call. Nothing here allocates device memory: the
// workspace is the context's.

namespace {

enum LinearOp : int { OP_FORWARD = 0, OP_FORWARD_BIAS = 1, OP_DIN = 2, OP_DW = 3 };

struct LinearPlan {
    int used;
    int device;
    int op;
    DType dtype;     // of A, B and (but for OP_DW) C/D and the bias
    int tf32;        // fp32 only
    uint32_t aligns; // log2 of the alignment of A, B, C/D and bias, 4 bits each
    size_t M, K, N;
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t a, b, c; // c describes both C and D
    cublasLtMatmulAlgo_t algo;
};

enum { PLAN_SLOTS = 64 };

thread_local LinearPlan plans[PLAN_SLOTS];
thread_local unsigned plan_victim;

// Largest power of two dividing the address, from the element's size (`least`: 4 fp32, 2 bf16
// and fp16) to 256 bytes (cuBLASLt's default assumption is 256; telling it less keeps it off
// algorithms that would need more).
unsigned pointer_alignment(const void *p, unsigned least) {
    const uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > least && (a % al) != 0) al >>= 1;
    return al;
}

// cuBLASLt's name for compute dtype t.
cudaDataType_t cuda_type(DType t) {
    return t == DTYPE_BF16 ? CUDA_R_16BF : t == DTYPE_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

unsigned log2u(unsigned x) {
    unsigned r = 0;
    while (x > 1) x >>= 1, r++;
    return r;
}

// The shape of one GEMM in cuBLASLt's terms (see the top of the file).
struct GemmShape {
    cublasOperation_t transa, transb;
    uint64_t a_rows, a_cols, b_rows, b_cols, c_rows, c_cols;
    int64_t lda, ldb, ldc;
};

GemmShape gemm_shape(int op, size_t M, size_t K, size_t N) {
    GemmShape s;
    switch (op) {
    case OP_FORWARD:
    case OP_FORWARD_BIAS:
        s = {CUBLAS_OP_T, CUBLAS_OP_N, K, N, K, M, N, M, (int64_t)K, (int64_t)K, (int64_t)N};
        break;
    case OP_DIN:
        s = {CUBLAS_OP_N, CUBLAS_OP_N, K, N, N, M, K, M, (int64_t)K, (int64_t)N, (int64_t)K};
        break;
    default: // OP_DW
        s = {CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, M, K, N, (int64_t)K, (int64_t)N, (int64_t)K};
        break;
    }
    return s;
}

// Builds a plan in `p`: descriptors, layouts and the heuristic's best algorithm for pointers of
// these alignments. Returns 0, or records the error under `where` and returns 1.
int plan_build(LinearPlan *p, CudaContext *ctx, int op, size_t M, size_t K, size_t N,
               const unsigned align[4], const void *bias, const char *where) {
    const cublasComputeType_t compute = p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const GemmShape s = gemm_shape(op, M, K, N);
    const cudaDataType_t ab_type = cuda_type(p->dtype);
    const cudaDataType_t cd_type = op == OP_DW ? CUDA_R_32F : ab_type;
    cublasStatus_t st = cublasLtMatmulDescInit(&p->desc, compute, CUDA_R_32F);
    const int32_t transa = s.transa, transb = s.transb;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                            sizeof transa);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                            sizeof transb);
    if (op == OP_FORWARD_BIAS) {
        const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bias_type = ab_type;
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof epilogue);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof bias_type);
        // the heuristic reads the bias pointer's value for its alignment (never dereferences
        // it); every later call sets the real one, which has the same alignment (the key)
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutInit(&p->a, ab_type, s.a_rows, s.a_cols, s.lda);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutInit(&p->b, ab_type, s.b_rows, s.b_cols, s.ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutInit(&p->c, cd_type, s.c_rows, s.c_cols, s.ldc);
    if (cuda_note_cublas(st, where)) return 1;

    cublasLtMatmulPreferenceOpaque_t pref;
    st = cublasLtMatmulPreferenceInit(&pref);
    const uint64_t workspace = CUDA_WORKSPACE_BYTES;
    const uint32_t align_a = align[0], align_b = align[1], align_c = align[2];
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace, sizeof workspace);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &align_a, sizeof align_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &align_b, sizeof align_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &align_c, sizeof align_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &align_c, sizeof align_c);
    // A split-K algorithm may add its slices in D's own type (INPLACE, OUTPUT_TYPE), which for a
    // 16-bit D rounds the sum more than once; only fp32 slices (or no split) keep D's one rounding.
    const uint32_t reductions = cd_type == CUDA_R_32F
                                    ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK
                                    : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &reductions, sizeof reductions);
    if (cuda_note_cublas(st, where)) return 1;

    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, &p->desc, &p->a, &p->b, &p->c, &p->c, &pref, 1,
                                        &result, &found);
    if (cuda_note_cublas(st, where)) return 1;
    if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
        // no fallback: a shape cuBLASLt cannot do is an error the caller sees
        cuda_note_cublas(found < 1 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state, where);
        return 1;
    }
    p->algo = result.algo;
    return 0;
}

// The thread's plan for this GEMM in dtype t (built on first use), or NULL with the error recorded.
LinearPlan *plan_get(CudaContext *ctx, DType t, int op, size_t M, size_t K, size_t N,
                     const void *a_ptr, const void *b_ptr, const void *c_ptr, const void *bias,
                     const char *where) {
    int device = 0;
    if (cuda_note(cudaGetDevice(&device), where)) return NULL;
    const unsigned elem = (unsigned)cuda_dtype_bytes(t), c_elem = op == OP_DW ? 4u : elem;
    const unsigned align[4] = {pointer_alignment(a_ptr, elem), pointer_alignment(b_ptr, elem),
                               pointer_alignment(c_ptr, c_elem),
                               bias ? pointer_alignment(bias, elem) : 256u};
    const uint32_t aligns =
        log2u(align[0]) | log2u(align[1]) << 4 | log2u(align[2]) << 8 | log2u(align[3]) << 12;
    const int tf32 = t == DTYPE_FP32 && ctx->tf32 != 0;
    for (int i = 0; i < PLAN_SLOTS; i++) {
        LinearPlan *p = &plans[i];
        if (p->used && p->op == op && p->dtype == t && p->M == M && p->K == K && p->N == N &&
            p->tf32 == tf32 && p->aligns == aligns && p->device == device)
            return p;
    }
    LinearPlan *p = &plans[plan_victim++ % PLAN_SLOTS];
    p->used = 0;
    p->device = device;
    p->op = op;
    p->dtype = t;
    p->tf32 = tf32;
    p->aligns = aligns;
    p->M = M, p->K = K, p->N = N;
    if (plan_build(p, ctx, op, M, K, N, align, bias, where)) return NULL;
    p->used = 1;
    return p;
}

// D = alpha op(A) op(B) + beta C with C = D, through the plan for (t, op, M, K, N): a, b and the
// bias are arrays of t, d of t too but for OP_DW (fp32).
void run_gemm(DType t, int op, void *d, const void *a, const void *b, const void *bias, float beta,
              size_t M, size_t K, size_t N, const char *where) {
    CudaContext *ctx = cuda_ctx();
    LinearPlan *p = plan_get(ctx, t, op, M, K, N, a, b, d, bias, where);
    if (!p) return;
    if (op == OP_FORWARD_BIAS &&
        cuda_note_cublas(cublasLtMatmulDescSetAttribute(&p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof bias),
                         where))
        return;
    const float alpha = 1.0f;
    cuda_note_cublas(cublasLtMatmul(ctx->lt, &p->desc, &alpha, a, &p->a, b, &p->b, &beta, d, &p->c,
                                    d, &p->c, &p->algo, ctx->workspace, CUDA_WORKSPACE_BYTES,
                                    ctx->stream),
                     where);
}

// out[i, :] = b (or 0 without b) for M rows of N: forward's empty product (K == 0).
template <class T> __global__ void fill_rows_kernel(T *out, const T *b, size_t M, size_t N) {
    const size_t n = M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store(out, i, b ? load(b, i % N) : 0.0f);
}

// db[j] += sum over M rows of dout[i * N + j]. A block takes COLSUM_COLS adjacent columns;
// its COLSUM_ROWS thread rows each sum every COLSUM_ROWS-th row (reads coalesced along j),
// then the partial sums are added in a fixed order: the same bits on every run.
enum { COLSUM_COLS = 32, COLSUM_ROWS = 16 };

template <class T>
__global__ void __launch_bounds__(COLSUM_COLS *COLSUM_ROWS)
    column_sums_add_kernel(float *db, const T *dout, size_t M, size_t N) {
    __shared__ float partial[COLSUM_ROWS][COLSUM_COLS + 1];
    const size_t j = blockIdx.x * (size_t)COLSUM_COLS + threadIdx.x;
    float acc = 0.0f;
    if (j < N)
        for (size_t i = threadIdx.y; i < M; i += COLSUM_ROWS) acc += load(dout, i * N + j);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < N) {
        float s = partial[0][threadIdx.x];
        for (int r = 1; r < COLSUM_ROWS; r++) s += partial[r][threadIdx.x];
        db[j] += s;
    }
}

} // namespace

extern "C" void cuda_linear_forward(DType t, void *out, const void *in, const void *w,
                                    const void *b, size_t M, size_t K, size_t N) {
    if (M == 0 || N == 0) return;
    if (K == 0) { // an empty product: out is the bias (or zero); ld = 0 is no valid layout
        if (cuda_dispatch(t, "linear_forward", [&](auto e) {
                using T = typename decltype(e)::type;
                fill_rows_kernel<<<cuda_blocks(M * N, 256), 256, 0, cuda_ctx()->stream>>>(
                    (T *)out, (const T *)b, M, N);
            }))
            return;
        CUDA_LAUNCHED("linear_forward");
        return;
    }
    if (cuda_refused(t, "linear_forward")) return;
    const void *bias = b;
    // cuBLASLt's bias epilogue has no alignment preference, and a kernel picked for a 16-byte
    // aligned vector faults on a bias a flat bf16 unit puts at any even address (PyTorch, too,
    // keeps such a bias off the epilogue: pytorch/pytorch#194497). So a bias off 16 bytes is
    // copied to the context's scratch (256-byte aligned) first: same stream, so after the last op
    // that used the scratch and before the GEMM reads it; the sum is still rounded once. A bias
    // wider than the scratch (N > 32,768 in bf16; no model here is that wide) is refused as an
    // invalid value, not handed to the epilogue misaligned.
    const size_t bias_bytes = N * cuda_dtype_bytes(t);
    const int misaligned = b && (uintptr_t)b % 16 != 0;
    if (misaligned && bias_bytes > CUDA_SCRATCH_BYTES) {
        cuda_note(cudaErrorInvalidValue, "linear_forward (a misaligned bias over the scratch)");
        return;
    }
    if (misaligned) {
        CudaContext *ctx = cuda_ctx();
        if (cuda_note(
                cudaMemcpyAsync(ctx->scratch, b, bias_bytes, cudaMemcpyDeviceToDevice, ctx->stream),
                "linear_forward"))
            return;
        bias = ctx->scratch;
    }
    run_gemm(t, b ? OP_FORWARD_BIAS : OP_FORWARD, out, w, in, bias, 0.0f, M, K, N,
             "linear_forward");
}

extern "C" void cuda_linear_backward(DType t, void *din, float *dw, float *db, const void *dout,
                                     const void *in, const void *w, size_t M, size_t K, size_t N) {
    if (M == 0) return; // no rows: every gradient is += 0 and din is empty
    if (cuda_refused(t, "linear_backward")) return;
    CudaContext *ctx = cuda_ctx();
    if (din && K > 0) {
        if (N == 0)
            cuda_note(cudaMemsetAsync(din, 0, M * K * cuda_dtype_bytes(t), ctx->stream),
                      "linear_backward");
        else
            run_gemm(t, OP_DIN, din, w, dout, NULL, 0.0f, M, K, N, "linear_backward");
    }
    if (K > 0 && N > 0) run_gemm(t, OP_DW, dw, in, dout, NULL, 1.0f, M, K, N, "linear_backward");
    if (db && N > 0) {
        const dim3 threads(COLSUM_COLS, COLSUM_ROWS);
        const unsigned blocks = (unsigned)((N + COLSUM_COLS - 1) / COLSUM_COLS);
        cuda_dispatch(t, "linear_backward", [&](auto e) {
            using T = typename decltype(e)::type;
            column_sums_add_kernel<<<blocks, threads, 0, ctx->stream>>>(db, (const T *)dout, M, N);
        });
        CUDA_LAUNCHED("linear_backward");
    }
}
