/* Attention of decode rows (one new token per sequence) straight over the paged KV cache, on
 * x86-64 with AVX2 + FMA + F16C.
 *
 * Why: the torch path first copies every block of each sequence's keys and values out of the
 * cache (index_select), per layer and step, then runs SDPA on the copy with a padding mask. Here
 * each (sequence, KV head) reads its keys and values where they lie, once for all the query heads
 * that share them (GQA).
 *
 * Layouts: q and out [T][n_kv * group][hd] (row `rows[g]` is sequence g's token); k and v
 * [slots][n_kv][hd] with slot = tables[g][t / bs] * bs + t % bs for key t < kv_lens[g] (the last `window`
 * of them where window > 0); q and out in dt, k and v in kdt (0 float32, 1 bfloat16, 2 float16): dt, or a
 * 16-bit kdt under a float32 dt (a float32 model's narrower cache); scores, softmax and sums in float32; scores
 * soft-capped where cap > 0, sinks [n_kv * group] float32 logits or NULL (attention.h).
 * Built and loaded by trtserve/kernels/attention.py; it shares torch's OpenMP runtime.
 */
#include <stdlib.h>

#include "attention.h"

/* Returns 0; -1 when hd is not a multiple of 8, a length is out of range or memory runs out (the
 * caller runs torch's path). tables: [G][n_blk] int64; kv_lens, rows: [G] int64. */
int trtserve_decode_attention(const void* q, const void* k, const void* v, int dt, int kdt, int64_t G, int64_t n_kv,
                              int64_t group, int64_t hd, const int64_t* tables, int64_t n_blk,
                              const int64_t* kv_lens, const int64_t* rows, int64_t bs, float scale, int64_t window,
                              float cap, const float* sinks, void* out, int threads) {
    if (hd % 8 || dt < F32 || dt > F16 || !cache_dtype_ok(dt, kdt)) return -1;
    int64_t longest = 0;
    for (int64_t g = 0; g < G; g++) {
        if (kv_lens[g] < 1 || kv_lens[g] > n_blk * bs) return -1;
        longest = kv_lens[g] > longest ? kv_lens[g] : longest;
    }
    const split_t sp = split_heads(G, n_kv, group, threads);
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float* buf = malloc(sizeof(float) * (size_t)head_scratch(sp.nr, longest, hd));
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic) /* sequences' lengths differ: a static split left one thread waiting */
        for (int64_t w = 0; w < G * sp.per_seq; w++) {
            if (!buf) continue;
            const int64_t g = w / sp.per_seq, h0 = w % sp.per_seq * sp.nr, qoff = rows[g] * n_kv * group * hd;
            const int64_t first = window_start(kv_lens[g], window);
#define HEADS(qdt, cdt) heads(q, qdt, k, v, cdt, qdt, qoff, n_kv, h0, group, sp.nr, hd, tables + g * n_blk, first, kv_lens[g], bs, scale, cap, sinks, out, buf)
            CACHE_PAIRS(dt, kdt, HEADS)
#undef HEADS
        }
        free(buf);
    }
    return failed ? -1 : 0;
}
