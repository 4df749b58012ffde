/* Decode attention of one sequence's query heads that share a KV head, over its keys and values
 * where they lie in the paged KV cache; shared by decode_attention.c and decode_layers.c.
 * q and out in qdt, keys and values in dt; scores, softmax and sums in float32, the weights and the output rounded
 * to rdt (the model's dtype: the cache's, or float32 over a 16-bit cache of a float32 model, where torch's path
 * widens the keys and values and computes in float32).
 *
 * Each score is one FMA chain over the head dim and a horizontal sum, each output a sum over keys in
 * key order, whichever way the work is split: grouping query heads or keys changes no bit. heads_v runs
 * the query heads of a KV head together over 4 keys at a time, on dtypes.h's vectors; a head dim that is not
 * a multiple of its lanes (8 or 24 on the AVX-512 build) runs one head at a time over KB keys, so that the
 * chains still overlap (one chain a key leaves the FMA unit waiting on its latency). */
#ifndef TRTSERVE_ATTENTION_H
#define TRTSERVE_ATTENTION_H
#include <math.h>

#include "dtypes.h"

#define KB 8 /* keys whose score chains run together */
#define VT 64 /* keys whose values are weighed together (a tile of whole cache rows stays in L2) */

/* out[0, nv * 8) += sum over keys t in [t0, t1) of p[t] v[t][d0, d0 + nv * 8), in key order (out starts at
 * zero where t0 is 0); nv a constant after inlining. */
static inline __attribute__((always_inline)) void weigh_values(const void* v, int dt, const int64_t* vp, int64_t d0,
                                                              const float* p, int64_t t0, int64_t t1, int nv,
                                                              float* out) {
    __m256 acc[8];
    for (int i = 0; i < nv; i++) acc[i] = t0 ? _mm256_loadu_ps(out + 8 * i) : _mm256_setzero_ps();
    for (int64_t t = t0; t < t1; t++) {
        const __m256 w = _mm256_set1_ps(p[t]);
        for (int i = 0; i < nv; i++) acc[i] = _mm256_fmadd_ps(w, load8(v, dt, vp[t] + d0 + 8 * i), acc[i]);
    }
    for (int i = 0; i < nv; i++) _mm256_storeu_ps(out + 8 * i, acc[i]);
}

/* The largest of m8's 8 lanes. */
static inline __attribute__((always_inline)) float hmax8(__m256 m8) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

/* s[0, n) = exp(s - m) rounded to dt (n a multiple of 8); returns the unrounded values' 8 lane sums. */
static inline __attribute__((always_inline)) __m256 exp_rounded(float* s, int64_t n, float m, int dt) {
    const __m256 mb = _mm256_set1_ps(m);
    __m256 sum8 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mb));
        _mm256_storeu_ps(s + i, rnd8(e, dt));
        sum8 = _mm256_add_ps(sum8, e);
    }
    return sum8;
}

/* s[0, len) = exp(s - max s), rounded to dt (as torch's CPU flash attention: the weights meet V in the
 * input dtype, the sum is divided out at the end; this keeps bf16 engines' greedy tokens with HF's);
 * returns 1 / their float32 sum (8 lane sums, then the tail, added in a fixed order). A sink logit (gpt-oss;
 * -inf: none, which adds 0) joins the max and the sum but weighs no value. */
static inline __attribute__((always_inline)) float softmax_row(float* s, int64_t len, float sink, int dt) {
    const int64_t l8 = len & ~(int64_t)7;
    __m256 mv = _mm256_set1_ps(s[0]);
    for (int64_t i = 0; i < l8; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + i));
    float m = hmax8(mv);
    for (int64_t i = l8; i < len; i++) m = s[i] > m ? s[i] : m;
    m = sink > m ? sink : m;
    const __m256 mb = _mm256_set1_ps(m);
    __m256 sum8 = exp_rounded(s, l8, m, dt);
    if (l8 < len) { /* the last len mod 8 scores, padded with -inf (exp8 gives 0 there) */
        float t[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        memcpy(t, s + l8, sizeof(float) * (size_t)(len - l8));
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(t), mb));
        _mm256_storeu_ps(t, rnd8(e, dt));
        memcpy(s + l8, t, sizeof(float) * (size_t)(len - l8));
        sum8 = _mm256_add_ps(sum8, e);
    }
    return 1.0f / (hsum(sum8) + _mm256_cvtss_f32(exp8(_mm256_set1_ps(sink - m))));
}

/* s[0, len) = cap * tanh(s / cap) (Gemma 2's soft-capped scores, as HF's eager attention computes them). */
static inline __attribute__((always_inline)) void softcap_row(float* s, int64_t len, float cap) {
    const __m256 c = _mm256_set1_ps(cap);
    for (int64_t i = 0; i < len; i += 8) {
        float t[8] = {0};
        const int64_t k = len - i < 8 ? len - i : 8;
        memcpy(t, s + i, sizeof(float) * (size_t)k);
        _mm256_storeu_ps(t, _mm256_mul_ps(tanh8(_mm256_div_ps(_mm256_loadu_ps(t), c)), c));
        memcpy(s + i, t, sizeof(float) * (size_t)k);
    }
}

/* The first key a query at len - 1 attends within `window` keys (0: every key): HF's kv_idx > q_idx - window. */
static inline int64_t window_start(int64_t len, int64_t window) {
    return window > 0 && len > window ? len - window : 0;
}

/* inv[j] = softmax_row of head j's scores (j < n, query head h0 + j), soft-capped first where cap is set;
 * sinks: a logit per query head, or NULL. */
static inline __attribute__((always_inline)) void softmax_heads(float* scores, int64_t n, int64_t len, int64_t h0,
                                                               float cap, const float* sinks, int dt, float* inv) {
    for (int64_t j = 0; j < n; j++) {
        if (cap > 0) softcap_row(scores + j * len, len, cap);
        inv[j] = softmax_row(scores + j * len, len, sinks ? sinks[h0 + j] : -INFINITY, dt);
    }
}

/* The float32 scratch `heads` needs for `n` query heads over `len` keys (the last 2 * len hold int64s). */
static inline int64_t head_scratch(int64_t n, int64_t len, int64_t hd) {
    return n * (len + hd) + 2 * len;
}

/* How a step's attention is cut into tasks: per sequence, nr consecutive query heads a task, per_seq
 * tasks a sequence. Every head of a sequence where that leaves several tasks a thread (lengths
 * differ): each key's cache row (all KV heads) is then read once, front to back, which streams
 * better than reading one KV head's part of the rows a task. Else a KV head's group of query heads
 * (its keys read once for all of them), else one query head a task. */
typedef struct {
    int64_t nr, per_seq;
} split_t;

static inline split_t split_heads(int64_t seqs, int64_t n_kv, int64_t group, int threads) {
    if (seqs >= 4 * threads) return (split_t){n_kv * group, 1};
    return seqs * n_kv >= 4 * threads ? (split_t){group, n_kv} : (split_t){1, n_kv * group};
}

/* Query heads a tile takes at once: 4 on AVX-512's 32 registers, 3 on AVX2's 16. */
#define HB (LANES == 16 ? 4 : 3)

/* hb (a constant after inlining, <= HB) query heads sharing a KV head by 4 keys from t: their scores, each a
 * LANES-lane FMA chain over the head dim and vhsum4; every key row loaded once for the hb heads. */
static inline __attribute__((always_inline)) void score_tile(const void* q, int qdt, int64_t qo, const void* k, int dt,
                                                            int64_t ko, const int64_t* at, int64_t t, int64_t hd,
                                                            int hb, __m128 sc, float* s, int64_t len) {
    vec a[HB][4];
    for (int j = 0; j < hb; j++)
        for (int i = 0; i < 4; i++) a[j][i] = vzero();
    for (int64_t d = 0; d < hd; d += LANES) {
        vec qv[HB];
        for (int j = 0; j < hb; j++) qv[j] = vloadw(q, qdt, qo + j * hd + d);
        for (int i = 0; i < 4; i++) {
            const vec kv = vloadw(k, dt, at[t + i] + ko + d);
            for (int j = 0; j < hb; j++) a[j][i] = vfma(qv[j], kv, a[j][i]);
        }
    }
    for (int j = 0; j < hb; j++) _mm_storeu_ps(s + j * len + t, _mm_mul_ps(vhsum4(a[j][0], a[j][1], a[j][2], a[j][3]), sc));
}

/* out[j][0, LANES nv) += sum over keys t in [t0, t1) of p[j][t] v[t][d0, d0 + LANES nv), in key order, for hb heads
 * sharing a KV head (hb, nv constants after inlining, hb * nv <= 16 accumulators): each value row loaded once. */
static inline __attribute__((always_inline)) void value_tile(const void* v, int dt, const int64_t* at, int64_t d0,
                                                            const float* p, int64_t len, int64_t t0, int64_t t1,
                                                            int hb, int nv, float* out, int64_t hd) {
    vec a[HB][4];
    for (int j = 0; j < hb; j++)
        for (int i = 0; i < nv; i++) a[j][i] = t0 ? vload(out + j * hd + LANES * i) : vzero();
    for (int64_t t = t0; t < t1; t++) {
        vec w[HB];
        for (int j = 0; j < hb; j++) w[j] = vset1(p[j * len + t]);
        for (int i = 0; i < nv; i++) {
            const vec vv = vloadw(v, dt, at[t] + d0 + LANES * i);
            for (int j = 0; j < hb; j++) a[j][i] = vfma(w[j], vv, a[j][i]);
        }
    }
    for (int j = 0; j < hb; j++)
        for (int i = 0; i < nv; i++) vstore(out + j * hd + LANES * i, a[j][i]);
}

#define PF 32 /* keys ahead whose key and value rows the score loop prefetches into L2 */
#define PF_L1 8 /* and whose key rows it then brings on to L1 (L1's few misses in flight cannot cover DRAM) */

/* Prefetch hd values at off in the cache rows of keys [t0, t1) (row starts at[t]), with `hint`. */
static inline __attribute__((always_inline)) void prefetch_rows(const void* base, int dt, const int64_t* at, int64_t t0,
                                                               int64_t t1, int64_t off, int64_t hd, int hint) {
    const int64_t es = dt == F32 ? 4 : 2;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t b = 0; b < hd * es; b += 64) {
            const char* a = (const char*)base + (at[t] + off) * es + b;
            if (hint == _MM_HINT_T0) _mm_prefetch(a, _MM_HINT_T0);
            else _mm_prefetch(a, _MM_HINT_T1);
        }
}

/* How many of the task's heads j, j + 1, ... (< n) share head h0 + j's KV head, at most HB. */
static inline int head_run(int64_t h0, int64_t j, int64_t n, int64_t group) {
    const int64_t end = ((h0 + j) / group + 1) * group - h0, stop = end < n ? end : n;
    return (int)(stop - j < HB ? stop - j : HB);
}

#if HB > 3
#define HB4(call) case 4: call(4); break;
#else
#define HB4(call)
#endif
#define HB_SWITCH(hb, call) \
    switch (hb) {           \
    HB4(call)               \
    case 3: call(3); break; \
    case 2: call(2); break; \
    default: call(1);       \
    }

/* heads (below) on LANES lanes, hd a multiple of LANES: query heads that share a KV head go through the keys
 * and values HB at a time, so each cache row is loaded once for them and the heads' sums are
 * independent FMA chains; the score loop prefetches the key and value rows PF keys ahead into L2 and the
 * key rows PF_L1 ahead on into L1, and each tile of values prefetches the next: KV read from DRAM streams near memory
 * speed. Each score is one LANES-lane FMA chain and a horizontal sum, each output a sum over keys in
 * key order, however the heads are grouped. */
static inline __attribute__((always_inline)) void heads_v(const void* q, int qdt, const void* k, const void* v, int dt,
                                                        int rdt, int64_t qoff, int64_t h0, int64_t group, int64_t n,
                                                        int64_t hd, const int64_t* at, int64_t len, float scale,
                                                        float cap, const float* sinks, void* out, float* scores,
                                                        float* acc) {
    const __m128 sc = _mm_set1_ps(scale);
    const int64_t l4 = len & ~(int64_t)3;
    for (int64_t j = 0; j < n;) { /* heads j .. j + hb - 1: one KV head's, at most HB */
        const int64_t kvh = (h0 + j) / group, qo = qoff + (h0 + j) * hd, ko = kvh * hd;
        const int hb = head_run(h0, j, n, group);
        float* s = scores + j * len;
        for (int64_t t = 0; t < l4; t += 4) {
            prefetch_rows(k, dt, at, t + PF_L1, t + PF_L1 + 4 < len ? t + PF_L1 + 4 : len, ko, hd, _MM_HINT_T0);
            prefetch_rows(k, dt, at, t + PF, t + PF + 4 < len ? t + PF + 4 : len, ko, hd, _MM_HINT_T1);
            prefetch_rows(v, dt, at, t + PF, t + PF + 4 < len ? t + PF + 4 : len, ko, hd, _MM_HINT_T1);
#define SCORE(c) score_tile(q, qdt, qo, k, dt, ko, at, t, hd, c, sc, s, len)
            HB_SWITCH(hb, SCORE)
#undef SCORE
        }
        for (int jj = 0; jj < hb; jj++)
            for (int64_t t = l4; t < len; t++) { /* the last len mod 4 keys one at a time */
                vec a = vzero();
                for (int64_t d = 0; d < hd; d += LANES)
                    a = vfma(vloadw(q, qdt, qo + jj * hd + d), vloadw(k, dt, at[t] + ko + d), a);
                s[jj * len + t] = _mm_cvtss_f32(_mm_mul_ps(vhsum4(a, a, a, a), sc));
            }
        j += hb;
    }
    float inv[n];
    softmax_heads(scores, n, len, h0, cap, sinks, rdt, inv);
    for (int64_t t0 = 0; t0 < len; t0 += VT) { /* VT keys' values, every query head, while they are in L2 */
        const int64_t t1 = t0 + VT < len ? t0 + VT : len;
        for (int64_t j = 0; j < n;) {
            const int64_t kvh = (h0 + j) / group;
            const int hb = head_run(h0, j, n, group);
            const float* p = scores + j * len;
            float* a = acc + j * hd;
            int64_t d = 0;
            prefetch_rows(v, dt, at, t1, t1 + VT < len ? t1 + VT : len, kvh * hd, hd, _MM_HINT_T1);
            for (; d + 4 * LANES <= hd; d += 4 * LANES) {
#define VALUE(c) value_tile(v, dt, at, kvh * hd + d, p, len, t0, t1, c, 4, a + d, hd)
                HB_SWITCH(hb, VALUE)
#undef VALUE
            }
            for (; d < hd; d += LANES) {
#define VALUE(c) value_tile(v, dt, at, kvh * hd + d, p, len, t0, t1, c, 1, a + d, hd)
                HB_SWITCH(hb, VALUE)
#undef VALUE
            }
            j += hb;
        }
    }
    for (int64_t j = 0; j < n; j++) {
        const int64_t qo = qoff + (h0 + j) * hd;
        for (int64_t i = 0; i < hd; i++) store1(out, qdt, qo + i, rnd(acc[j * hd + i] * inv[j], rdt));
    }
}

/* One sequence's query heads h0 .. h0 + nr - 1 (query head h at q[qoff + h * hd], qoff the sequence's
 * first; its KV head h / group) over its keys first .. len - 1 (first > 0: a window's), scores soft-capped
 * where cap > 0, each head's sink logit (sinks [heads], or NULL) in its softmax. buf: head_scratch(nr, len, hd)
 * floats. */
static inline __attribute__((always_inline)) void heads(const void* q, int qdt, const void* k, const void* v, int dt,
                                                       int rdt, int64_t qoff, int64_t n_kv, int64_t h0, int64_t group,
                                                       int64_t nr, int64_t hd, const int64_t* table, int64_t first,
                                                       int64_t len, int64_t bs, float scale, float cap,
                                                       const float* sinks, void* out, float* buf) {
    const int64_t n = nr; /* query heads of the task; head j: query head h0 + j */
    len -= first;                            /* key t below: key first + t */
    float* scores = buf;                     /* [n][len] */
    float* acc = buf + n * len;              /* [n][hd] */
    int64_t* at = (int64_t*)(acc + n * hd);  /* [len]: where key t's cache row starts */
    for (int64_t t = 0, blk = first / bs, off = first % bs; t < len; t++) {
        at[t] = (table[blk] * bs + off) * n_kv * hd;
        if (++off == bs) off = 0, blk++;
    }
    if (hd % LANES == 0) {
        heads_v(q, qdt, k, v, dt, rdt, qoff, h0, group, n, hd, at, len, scale, cap, sinks, out, scores, acc);
        return;
    }
#define QOFF(j) (qoff + (h0 + (j)) * hd)
#define KVOFF(j) ((h0 + (j)) / group * hd)
    const __m128 sc = _mm_set1_ps(scale);
    int64_t t = 0;
    for (; t + KB <= len; t += KB) { /* KB keys, every query head of the task while they are in L1 */
        for (int64_t j = 0; j < n; j++) {
            const int64_t qo = QOFF(j), ko = KVOFF(j);
            __m256 s[KB];
            for (int i = 0; i < KB; i++) s[i] = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 8) {
                const __m256 qv = load8(q, qdt, qo + d);
                for (int i = 0; i < KB; i++) s[i] = _mm256_fmadd_ps(qv, load8(k, dt, at[t + i] + ko + d), s[i]);
            }
            _mm_storeu_ps(scores + j * len + t, _mm_mul_ps(hsum4(s[0], s[1], s[2], s[3]), sc));
            _mm_storeu_ps(scores + j * len + t + 4, _mm_mul_ps(hsum4(s[4], s[5], s[6], s[7]), sc));
        }
    }
    for (; t < len; t++) {
        for (int64_t j = 0; j < n; j++) {
            const int64_t qo = QOFF(j), ko = KVOFF(j);
            __m256 s = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 8) s = _mm256_fmadd_ps(load8(q, qdt, qo + d), load8(k, dt, at[t] + ko + d), s);
            scores[j * len + t] = hsum(s) * scale;
        }
    }
    float inv[n];
    softmax_heads(scores, n, len, h0, cap, sinks, rdt, inv);
    for (int64_t t0 = 0; t0 < len; t0 += VT) { /* VT keys' values, every query head, while they are in L2 */
        const int64_t t1 = t0 + VT < len ? t0 + VT : len;
        for (int64_t j = 0; j < n; j++) {
            const float* p = scores + j * len;
            float* a = acc + j * hd;
            const int64_t vo = KVOFF(j);
            int64_t d = 0;
            for (; d + 64 <= hd; d += 64) weigh_values(v, dt, at, vo + d, p, t0, t1, 8, a + d);
            for (; d + 32 <= hd; d += 32) weigh_values(v, dt, at, vo + d, p, t0, t1, 4, a + d);
            for (; d < hd; d += 8) weigh_values(v, dt, at, vo + d, p, t0, t1, 1, a + d);
        }
    }
    for (int64_t j = 0; j < n; j++) {
        const int64_t qo = QOFF(j);
        for (int64_t i = 0; i < hd; i++) store1(out, qdt, qo + i, rnd(acc[j * hd + i] * inv[j], rdt));
    }
#undef QOFF
#undef KVOFF
}

#endif
