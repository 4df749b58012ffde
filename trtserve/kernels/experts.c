/* One layer's mixture of experts in one call, on x86-64 with AVX2 + FMA + F16C (experts.h): route the
 * rows, group them by expert, run each expert the rows use once over its rows, combine with the routing
 * weights. The op-by-op decoder calls it for prefill and decode (models/moe.py); the one-call decode step
 * (decode_layers.c) runs the same experts_block inside its own parallel region.
 *
 * Layouts: x, y [M][H] in dt (0 float32, 1 bfloat16, 2 float16); the experts as experts.h's experts_t
 * (plain, int8 or int4 weights).
 * Rows go through in pieces of CHUNK, so the scratch stays small for a long prompt; each piece reads
 * the weights of the experts its rows use once.
 * Built and loaded by trtserve/kernels/experts.py; it shares torch's OpenMP runtime.
 */
#include <stdlib.h>

#include "experts.h"

#define CHUNK 256 /* rows a piece: a prompt's scratch stays in the low megabytes */

static void piece(const experts_t* e, const float* x, int64_t M, int64_t H, void* y, void* scratch, int threads,
                  int dt) {
#pragma omp parallel num_threads(threads)
    experts_any(e, x, M, H, y, dt, scratch, dt);
}

/* y = the experts on x. Returns the routed experts read, summed over the pieces (what a step's rows share:
 * models/moe.py counts it); -1 (y untouched) where a size or dtype is out of range or memory runs out. */
int64_t trtserve_experts(const experts_t* e, const void* x, int dt, int64_t M, int64_t H, void* y, int threads) {
    if (dt < F32 || dt > F16 || M < 1 || H < 1 || !experts_ok(e, H, dt)) return -1;
    const int64_t rows = M < CHUNK ? M : CHUNK;
    float* xf = malloc(sizeof(float) * (size_t)(rows * H));
    void* scratch = malloc((size_t)experts_scratch(e, rows, H));
    if (!xf || !scratch) {
        free(xf);
        free(scratch);
        return -1;
    }
    const size_t es = dt == F32 ? 4 : 2;
    int64_t read = 0;
    for (int64_t m0 = 0; m0 < M; m0 += CHUNK) {
        const int64_t n = M - m0 < CHUNK ? M - m0 : CHUNK;
        for (int64_t i = 0; i < n * H; i++) xf[i] = load1(x, dt, m0 * H + i);
        void* out = (char*)y + (size_t)(m0 * H) * es;
        piece(e, xf, n, H, out, scratch, threads, dt);
        const moe_buf_t b = experts_carve(e, n, H, scratch);
        read += *b.n_active - (e->S > 0); /* the shared expert is read by every step */
    }
    free(xf);
    free(scratch);
    return read;
}
