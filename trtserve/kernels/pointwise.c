/* The decoder's per-token glue in one call each, on x86-64 with AVX2 + FMA + F16C: residual add +
 * RMSNorm, RoPE on q and k with k and v written into the paged KV cache, and SiLU(fc) (or GeLU's) * gate.
 *
 * Why: at batch-1 decode each of these was 3-8 small torch ops per layer (~25 per layer in all),
 * and their dispatch overhead was a sizeable share of a small model's step. Used where the
 * whole-step kernel (decode_layers.c) is not: quantized weights, mixed batches of up to 64 rows.
 * Numerics are HF transformers' op for op (pointwise.h).
 *
 * Layouts (row-major, dtype 0 float32, 1 bfloat16, 2 float16):
 *   rms_norm:  h, delta, out [T][H], w [H]
 *   rope_kv:   qkv [T][(n_h + 2 n_kv) hd] (q heads, k heads, v heads), cos and signed sin tables
 *              [rows][rot] (or NULL: no RoPE), q_out [T][n_h hd], k and v caches [slots][n_kv][hd], pos (each
 *              token's table row) and slots [T] int64, q_norm [qn], k_norm [kn] in dt
 *   act_mul:   fg [T][2 I] ([fc | gate]), out [T][I]
 *   argmax:    x [R][V] float32 (a step's logits), out [R] int64
 * Built and loaded by trtserve/kernels/pointwise.py; it shares torch's OpenMP runtime.
 */
#include "pointwise.h"

#define PAR_MIN 16384 /* elements below which a call stays on one thread (a parallel region costs more) */

/* Each entry point runs a copy of its loop per dtype: with dt a constant, the per-element loads and stores
 * lose their dtype branches and the elementwise loops vectorise. */
#define BY_DTYPE(dt, call)                   \
    switch (dt) {                            \
    case F32: call(F32); break;              \
    case BF16: call(BF16); break;            \
    default: call(F16);                      \
    }

/* h = h + delta (rounded to dt) when delta is given, then out = RMSNorm(h) * w (or * (offset + w)). */
int trtserve_rms_norm(void* h, const void* delta, int dt, int64_t T, int64_t H, const void* w, float eps, float offset,
                      void* out, int threads) {
    if (dt < F32 || dt > F16) return -1;
#define NORM(d)                                                                                  \
    _Pragma("omp parallel for num_threads(threads) schedule(static) if (T * H >= PAR_MIN)")    \
    for (int64_t t = 0; t < T; t++) norm_row(h, d, delta, d, t * H, H, w, d, eps, offset, out, d)
    BY_DTYPE(dt, NORM)
#undef NORM
    return 0;
}

/* One token's q/k norms, rotations and cache writes (trtserve_rope_kv), in dt with the cache in kdt. */
static inline __attribute__((always_inline)) void rope_token(void* qkv, int dt, int kdt, int64_t t, int64_t n_h,
                                                            int64_t n_kv, int64_t hd, const void* cos, const void* sin,
                                                            const int64_t* pos, void* q_out, void* k_cache,
                                                            void* v_cache, const int64_t* slots, const void* q_norm,
                                                            const void* k_norm, int64_t qn, int64_t kn, float eps,
                                                            float offset, int64_t rot, int64_t chunks) {
    const int64_t width = (n_h + 2 * n_kv) * hd;
    for (int64_t c = 0; c < chunks; c++)
        qk_norm_chunk(qkv, dt, t * width, c, n_h, hd, q_norm, k_norm, qn, kn, dt, eps, offset);
    for (int64_t j = 0; j < n_h; j++)
        rope_head(qkv, dt, t * width + j * hd, q_out, dt, (t * n_h + j) * hd, cos, sin, pos[t] * rot, hd, rot, dt);
    for (int64_t j = 0; j < n_kv; j++) {
        const int64_t s0 = t * width + (n_h + j) * hd, d0 = (slots[t] * n_kv + j) * hd;
        rope_head(qkv, dt, s0, k_cache, kdt, d0, cos, sin, pos[t] * rot, hd, rot, dt);
        copy_row(qkv, dt, s0 + n_kv * hd, v_cache, kdt, d0, hd);
    }
}

/* Rotates the first rot dims of the q and k heads of each token at its table row (cos NULL: none); q goes to
 * q_out, k and v to the cache slot (in kdt: dt, or 16-bit under a float32 dt). q_norm and k_norm (or NULL):
 * RMSNorm weights (offset as norm_row's) applied first, in place in qkv, over each qn (kn) values of q (k): a head
 * (hd) or all of them (qk_norm_wide). */
int trtserve_rope_kv(void* qkv, int dt, int kdt, int64_t T, int64_t n_h, int64_t n_kv, int64_t hd, const void* cos,
                     const void* sin, const int64_t* pos, void* q_out, void* k_cache, void* v_cache,
                     const int64_t* slots, const void* q_norm, const void* k_norm, int64_t qn, int64_t kn, float eps,
                     float offset, int64_t rot, int threads) {
    if (!cos) rot = 0;
    if (dt < F32 || dt > F16 || rot % 2 || rot < 0 || rot > hd) return -1;
    if (!cache_dtype_ok(dt, kdt)) return -1;
    if ((q_norm || k_norm) && !qk_norm_ok(q_norm, k_norm, qn, kn, n_h, n_kv, hd)) return -1;
    const int64_t width = (n_h + 2 * n_kv) * hd, chunks = q_norm ? n_h * hd / qn + n_kv * hd / kn : 0;
#define ROPE(d, kd)                                                                                           \
    _Pragma("omp parallel for num_threads(threads) schedule(static) if (T * width >= PAR_MIN)")             \
    for (int64_t t = 0; t < T; t++)                                                                           \
        rope_token(qkv, d, kd, t, n_h, n_kv, hd, cos, sin, pos, q_out, k_cache, v_cache, slots, q_norm, k_norm, \
                   qn, kn, eps, offset, rot, chunks)
    CACHE_PAIRS(dt, kdt, ROPE)
#undef ROPE
    return 0;
}

/* out = act(fc) * gate (pointwise.h's SILU or GELU_TANH). */
int trtserve_act_mul(const void* fg, int dt, int64_t T, int64_t I, int act, void* out, int threads) {
    if (dt < F32 || dt > F16 || act < SILU || act > GELU_TANH) return -1;
#define ACT(d)                                                                                  \
    _Pragma("omp parallel for num_threads(threads) schedule(static) if (T * I >= PAR_MIN)")   \
    for (int64_t t = 0; t < T; t++) act_mul_row(fg, d, t * 2 * I, t * 2 * I + I, out, d, t * I, I, act, d)
    BY_DTYPE(dt, ACT)
#undef ACT
    return 0;
}

/* out[r] = the index of row r's largest value, the first of ties, or of its first NaN where it has one (torch.max's
 * indices): the greedy pick. Why: torch's max(dim=-1) with indices read a decode step's logits at ~9 GB/s (0.67 ms
 * for 32 rows of 49k on 2 cores); the values alone take a vector max and one scan for the first match. */
int trtserve_argmax(const float* x, int64_t R, int64_t V, int64_t* out, int threads) {
    if (V < 1) return -1;
#pragma omp parallel for num_threads(threads) schedule(static) if (R * V >= PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float* row = x + r * V;
        const int64_t v8 = V & ~(int64_t)7;
        __m256 m8 = _mm256_set1_ps(-INFINITY), nan8 = _mm256_setzero_ps();
        for (int64_t i = 0; i < v8; i += 8) {
            const __m256 v = _mm256_loadu_ps(row + i);
            m8 = _mm256_max_ps(m8, v);
            nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        float m8s[8];
        _mm256_storeu_ps(m8s, m8);
        float m = -INFINITY;
        int nan = _mm256_movemask_ps(nan8) != 0;
        for (int i = 0; i < 8; i++) m = m8s[i] > m ? m8s[i] : m;
        for (int64_t i = v8; i < V; i++) {
            nan |= row[i] != row[i];
            m = row[i] > m ? row[i] : m;
        }
        int64_t at = 0;
        if (nan)
            while (row[at] == row[at]) at++;
        else
            while (row[at] != m) at++;
        out[r] = at;
    }
    return 0;
}
