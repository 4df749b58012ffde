/* Decode attention of one sequence's query heads that share a KV head, over its keys and values
 * where they lie in the paged KV cache; shared by decode_attention.c and decode_layers.c.
 * q and out in qdt, keys and values in dt (the output rounded to dt); scores, softmax and sums in float32. */
#ifndef TRTSERVE_ATTENTION_H
#define TRTSERVE_ATTENTION_H
#include <math.h>

#include "dtypes.h"

/* One sequence, one KV head: its `group` query heads over its `len` keys. buf: group * (len + hd) floats. */
static inline __attribute__((always_inline)) void head(const void* q, int qdt, const void* k, const void* v, int dt,
                                                      int64_t qoff, int64_t n_kv, int64_t kvh, int64_t group,
                                                      int64_t hd, const int64_t* table, int64_t len, int64_t bs,
                                                      float scale, void* out, float* buf) {
    float* scores = buf;               /* [group][len] */
    float* acc = buf + group * len;    /* [group][hd] */
    for (int64_t t = 0; t < len; t++) {
        const int64_t kp = ((table[t / bs] * bs + t % bs) * n_kv + kvh) * hd;
        for (int64_t r = 0; r < group; r++) {
            __m256 s = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 8)
                s = _mm256_fmadd_ps(load8(q, qdt, qoff + r * hd + d), load8(k, dt, kp + d), s);
            scores[r * len + t] = hsum(s) * scale;
        }
    }
    float inv[group];
    for (int64_t r = 0; r < group; r++) { /* exp(s - max), summed in float32 */
        float* s = scores + r * len;
        float m = s[0], sum = 0;
        for (int64_t t = 1; t < len; t++) m = s[t] > m ? s[t] : m;
        for (int64_t t = 0; t < len; t++) {
            sum += (s[t] = expf(s[t] - m));
            /* As torch's CPU flash attention: the weights meet V in the input dtype, the sum is
             * divided out at the end; this keeps bf16 engines' greedy tokens with HF's. */
            if (dt != F32) s[t] = rnd(s[t], dt);
        }
        inv[r] = 1.0f / sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)(group * hd));
    for (int64_t t = 0; t < len; t++) {
        const int64_t vp = ((table[t / bs] * bs + t % bs) * n_kv + kvh) * hd;
        for (int64_t d = 0; d < hd; d += 8) {
            const __m256 vv = load8(v, dt, vp + d);
            for (int64_t r = 0; r < group; r++) {
                float* a = acc + r * hd + d;
                _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_set1_ps(scores[r * len + t]), vv, _mm256_loadu_ps(a)));
            }
        }
    }
    for (int64_t r = 0; r < group; r++)
        for (int64_t d = 0; d < hd; d++) store1(out, qdt, qoff + r * hd + d, rnd(acc[r * hd + d] * inv[r], dt));
}

#endif
