/* Dense GEMM for few rows (decode) on x86-64 with AVX2 + FMA + F16C: y = x w^T, w stored (N, K).
 *
 * Why: decode reads every weight once per token for a handful of rows, so it runs at the speed
 * the weights stream from memory, and torch's GEMV / small GEMMs stream well below that (its bf16
 * GEMMs are emulated on CPUs without bf16 matmul; docs/performance.md has the figures). Each thread
 * streams four weight rows at a time, front to back, and dots them with every row of x while they
 * sit in L1.
 *
 * Layouts: x [M][K], w [N][K], y [M][N]; x and y in one dtype (0 float32, 1 bfloat16, 2 float16),
 * w in that dtype or in int8 (3) with a float32 scale per output row (W8A16); sums are float32.
 * Built and loaded by trtserve/kernels/dense.py; it shares torch's OpenMP runtime.
 */
#include <stdlib.h>

#include "amx.h"
#include "gemv.h"

static inline __attribute__((always_inline)) void gemm(const float* xf, const uint16_t* xb, int64_t M, int64_t K,
                                                      const void* w, int64_t N, int wdt, const float* scale, int ydt,
                                                      void* y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < gemm_blocks(N); b++) gemm_block(b, xf, xb, M, K, w, N, wdt, scale, ydt, y, ydt);
}

/* y = (x w^T) * scale: x [M][K] and y [M][N] in xdt (float32, bf16 or fp16); w [N][K] in wdt (the
 * same, or int8 with `scale`, N float32 per-output factors; NULL for none). Returns 0; -1 when M or
 * a dtype is out of range or memory runs out (the caller runs torch's GEMM). */
int trtserve_dense_gemm(const void* x, int xdt, int64_t M, int64_t K, const void* w, int wdt, int64_t N,
                        const float* scale, void* y, int threads) {
    if (M < 1 || M > MAX_M || xdt < F32 || xdt > F16 || wdt < F32 || wdt > I8) return -1;
#if AMX
    if (xdt == BF16 && wdt == BF16 && M >= AMX_MIN_M && amx_permitted()) {
        uint16_t* xv = malloc(sizeof(uint16_t) * (size_t)amx_pack_size(M, K));
        if (!xv) return -1;
#pragma omp parallel num_threads(threads)
        amx_gemm(x, xdt, M, K, w, N, xv, xdt, y, xdt);
        free(xv);
        return 0;
    }
#endif
    const float* xf = x;
    float* buf = NULL;
    if (xdt != F32) { /* activations to float32 once, not once per weight block */
        buf = malloc(sizeof(float) * (size_t)(M * K));
        if (!buf) return -1;
        for (int64_t i = 0; i < M * K; i++) buf[i] = load1(x, xdt, i);
        xf = buf;
    }
    const uint16_t* xb = xdt == BF16 ? (const uint16_t*)x : NULL; /* tile_dp's bf16 x, as it came */
    if (wdt == F32) gemm(xf, NULL, M, K, w, N, F32, scale, xdt, y, threads);
    else if (wdt == BF16) gemm(xf, xb, M, K, w, N, BF16, scale, xdt, y, threads);
    else if (wdt == F16) gemm(xf, NULL, M, K, w, N, F16, scale, xdt, y, threads);
    else gemm(xf, NULL, M, K, w, N, I8, scale, xdt, y, threads);
    free(buf);
    return 0;
}

/* The fewest rows that run on AMX (amx.h), 0 in a build without it: from there a row's sums take another order. */
int trtserve_amx_min_rows(void) {
#if AMX
    return AMX_MIN_M;
#else
    return 0;
#endif
}
