/* One layer's mixture of experts in one call, on x86-64 with AVX2 + FMA + F16C (experts.h): route the
 * rows, group them by expert, run each expert the rows use once over its rows, combine with the routing
 * weights. The op-by-op decoder calls it for prefill and decode (models/moe.py); the one-call decode step
 * (decode_layers.c) runs the same experts_block inside its own parallel region.
 *
 * Layouts: x, y [M][H] in dt (0 float32, 1 bfloat16, 2 float16); the experts as experts.h's experts_t.
 * Rows go through in pieces of CHUNK, so the scratch stays small for a long prompt; each piece reads
 * the weights of the experts its rows use once.
 * Built and loaded by trtserve/kernels/experts.py; it shares torch's OpenMP runtime.
 */
#include <stdlib.h>

#include "experts.h"

#define CHUNK 256 /* rows a piece: a prompt's scratch stays in the low megabytes */

static inline __attribute__((always_inline)) void piece(const experts_t* e, const float* x, int64_t M, int64_t H,
                                                       void* y, void* scratch, int threads, int dt) {
#pragma omp parallel num_threads(threads)
    experts_block(e, x, M, H, y, dt, scratch, dt);
}

/* y = the experts on x. Returns 0; -1 (y untouched) where a size or dtype is out of range or memory runs out. */
int trtserve_experts(const experts_t* e, const void* x, int dt, int64_t M, int64_t H, void* y, int threads) {
    if (dt < F32 || dt > F16 || M < 1 || H < 1 || e->E < 1 || e->k < 1 || e->k > e->E || e->k > 64 || e->I < 1 ||
        e->S < 0)
        return -1;
    const int64_t rows = M < CHUNK ? M : CHUNK;
    float* xf = malloc(sizeof(float) * (size_t)(rows * H));
    void* scratch = malloc((size_t)experts_scratch(e, rows, H));
    if (!xf || !scratch) {
        free(xf);
        free(scratch);
        return -1;
    }
    const size_t es = dt == F32 ? 4 : 2;
    for (int64_t m0 = 0; m0 < M; m0 += CHUNK) {
        const int64_t n = M - m0 < CHUNK ? M - m0 : CHUNK;
        for (int64_t i = 0; i < n * H; i++) xf[i] = load1(x, dt, m0 * H + i);
        void* out = (char*)y + (size_t)(m0 * H) * es;
        if (dt == F32) piece(e, xf, n, H, out, scratch, threads, F32);
        else if (dt == BF16) piece(e, xf, n, H, out, scratch, threads, BF16);
        else piece(e, xf, n, H, out, scratch, threads, F16);
    }
    free(xf);
    free(scratch);
    return 0;
}
