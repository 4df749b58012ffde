/* W4A16 GEMM for few rows (decode) on x86-64 with AVX2 + FMA, over torch's CPU int4 pack.
 *
 * Why: torch's `_weight_int4pack_mm_for_cpu` unpacks int4 far below memory speed on AVX2 CPUs, and
 * far slower still with float32 activations; decode is bandwidth-bound, so int4 should stream at
 * memory speed. This kernel reads the same packed weights (no second copy) and keeps activations in
 * float32 through the sums.
 *
 * Layouts and the per-unit math: int4.h (shared with decode_layers.c, whose one-call decode step
 * computes each int4 linear exactly as this does). x [M][K] bf16 or float32, y [M][N] in x's dtype;
 * q8: x rounded to int8 per group (int4.h's int8-activation path) where this build has it.
 * Built and loaded by trtserve/kernels/int4.py; it shares torch's OpenMP runtime.
 */
#include <stdlib.h>

#include "int4.h"

/* Returns 0, or -1 when out of memory, or bn is not 32 or 64 or does not divide N (the caller falls back to torch's kernel). */
int trtserve_int4_gemm(const void* x, int x_bf16, int64_t M, int64_t K, const uint8_t* w, int64_t N, int64_t bn,
                       const void* sz, int sz_bf16, int64_t gs, void* y, int q8, int threads) {
    if (!int4_block_ok(bn, N)) return -1;
    const int64_t ng = K / gs;
    const int xdt = x_bf16 ? BF16 : F32;
    q8 = q8 && int4_q8_ok(bn, gs);
    /* xf [M][K], xsum or xd [M][ng], xqs [M][ng], xq [M][K] bytes */
    float* xf = malloc(sizeof(float) * (size_t)(M * K + 2 * M * ng) + (size_t)(M * K));
    if (!xf) return -1;
    float* xsum = xf + M * K;
    int32_t* xqs = (int32_t*)(xsum + M * ng);
    int8_t* xq = (int8_t*)(xqs + M * ng);
    for (int64_t i = 0; i < M * K; i++) xf[i] = load1(x, xdt, i);
    for (int64_t i = 0; i < M * ng; i++) int4_prepare_group(xf, i, K, gs, q8, xsum, xqs, xq);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t u = 0; u < int4_units(N, bn); u++) /* stored rounds */
        int4_unit(u, xf, xsum, M, K, w, N, bn, sz, sz_bf16 ? BF16 : F32, gs, y, xdt, F32, q8 ? xq : NULL, xqs, xsum);
    free(xf);
    return 0;
}

/* Whether this build has the int8-activation path (INT4_Q8). */
int trtserve_int4_q8(void) { return INT4_Q8; }
