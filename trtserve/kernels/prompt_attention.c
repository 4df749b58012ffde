/* Attention of prompt rows (a sequence's new rows: a whole prompt, or a chunk of one after its cached keys)
 * straight over the paged KV cache, on x86-64 with AVX2 + FMA + F16C (16 lanes where built for AVX-512).
 *
 * Why: torch's path gathers each sequence's whole blocks of keys and values per layer, builds a padded
 * mask and runs SDPA, which computes here at 45-70 GFLOP/s, a quarter of the GEMM rate; prompt attention
 * was ~9% of the mixed workload (docs/performance.md). This is flash attention's tiling on the register
 * blocks of dtypes.h: each (sequence, KV head) has its keys packed once, transposed and in float32, so
 * a tile of scores is a plain GEMM block; the query heads that share a KV head are rows of one tile.
 *
 * Layouts: q and out [T][n_kv * group][hd]; sequence g's rows q_start[g] .. q_start[g] + q_len[g] - 1 sit at
 * positions kv_lens[g] - q_len[g] + i and attend causally to its keys 0 .. position (the last `window`
 * of them where window > 0); k and v [slots][n_kv][hd] with slot = tables[g][t / bs] * bs + t % bs.
 * Scores, softmax and sums in float32; as torch's CPU flash attention, the softmax weights meet the
 * values rounded to the model's dtype (rdt = q's) and the sum is divided out at the end. Scores
 * soft-capped where cap > 0; sinks: a logit per query head joining its softmax (attention.h), or NULL.
 * Built and loaded by trtserve/kernels/attention.py; it shares torch's OpenMP runtime. */
#include <stdlib.h>

#include "attention.h"

#define QT 16 /* query rows a task; times the KV head's group of query heads: a tile's rows */
#define KT 64 /* keys a tile */
#define RB 4 /* tile rows a register block */
#define SN (LANES == 16 ? 4 : 2) /* vectors a register block spans (of keys, or of the head dim) */

typedef struct {
    int64_t g, kvh, i0, i1, cost;
} task_t;

static int by_cost(const void* a, const void* b) { /* longest first: the dynamic schedule ends level */
    const int64_t x = ((const task_t*)a)->cost, y = ((const task_t*)b)->cost;
    return (x < y) - (x > y);
}

/* s[r][0, SN LANES) = scale * (q rows r < rb of qf) . (keys from the transposed kt[d][...], row stride ld);
 * rb a constant after inlining. */
static inline __attribute__((always_inline)) void score_block(const float* qf, int64_t hd, const float* kt, int64_t ld,
                                                             int rb, float scale, float* s) {
    vec a[RB][SN];
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < SN; i++) a[r][i] = vzero();
    for (int64_t d = 0; d < hd; d++) {
        vec k[SN];
        for (int i = 0; i < SN; i++) k[i] = vload(kt + d * ld + i * LANES);
        for (int r = 0; r < rb; r++) {
            const vec qb = vset1(qf[r * hd + d]);
            for (int i = 0; i < SN; i++) a[r][i] = vfma(qb, k[i], a[r][i]);
        }
    }
    const vec sc = vset1(scale);
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < SN; i++) vstore(s + r * KT + i * LANES, vmul(a[r][i], sc));
}

/* o[r][0, nv LANES) += sum over keys t < kn of p[r][t] v[t][0, nv LANES), in key order, for rows r < rb (rb, nv
 * constants after inlining). */
static inline __attribute__((always_inline)) void value_block(const float* p, const float* v, int64_t hd, int64_t kn,
                                                             int rb, int nv, float* o) {
    vec a[RB][SN];
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++) a[r][i] = vload(o + r * hd + i * LANES);
    for (int64_t t = 0; t < kn; t++) {
        vec vv[SN];
        for (int i = 0; i < nv; i++) vv[i] = vload(v + t * hd + i * LANES);
        for (int r = 0; r < rb; r++) {
            const vec pb = vset1(p[r * KT + t]);
            for (int i = 0; i < nv; i++) a[r][i] = vfma(pb, vv[i], a[r][i]);
        }
    }
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++) vstore(o + r * hd + i * LANES, a[r][i]);
}

#ifdef __AVX512BF16__ /* built so where the CPU has AVX512-BF16 (native.py) */
#define DOT 1
/* A bf16 model's tiles on vdpbf16ps, two products a lane an instruction (1.5x the FMA tiles' speed): keys packed
 * as pairs kp[d / 2][t] of (k[t][d], k[t][d + 1]), values as pairs vp[t / 2][d] of (v[t][d], v[t + 1][d]); the
 * query and the rounded weights in pairs too. As score_block, from the pairs of q rows qp [rb][hd / 2]. */
static inline __attribute__((always_inline)) void score_block_dp(const uint32_t* qp, int64_t hd, const uint32_t* kp,
                                                                int64_t ld, int rb, float scale, float* s) {
    __m512 a[RB][4];
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < 4; i++) a[r][i] = _mm512_setzero_ps();
    for (int64_t d2 = 0; d2 < hd / 2; d2++) {
        __m512bh k[4];
        for (int i = 0; i < 4; i++) k[i] = (__m512bh)_mm512_loadu_si512(kp + d2 * ld + i * 16);
        for (int r = 0; r < rb; r++) {
            const __m512bh qb = (__m512bh)_mm512_set1_epi32((int)qp[r * hd / 2 + d2]);
            for (int i = 0; i < 4; i++) a[r][i] = _mm512_dpbf16_ps(a[r][i], k[i], qb);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < 4; i++) _mm512_storeu_ps(s + r * KT + i * 16, _mm512_mul_ps(a[r][i], sc));
}

/* As value_block over key pairs: o[r][0, 16 nv) += sum over pairs t2 < kn2 of the weight pairs pp[r][t2] times the
 * value pairs vp[t2][...]. */
static inline __attribute__((always_inline)) void value_block_dp(const uint32_t* pp, const uint32_t* vp, int64_t hd,
                                                                int64_t kn2, int rb, int nv, float* o) {
    __m512 a[RB][4];
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++) a[r][i] = _mm512_loadu_ps(o + r * hd + i * 16);
    for (int64_t t2 = 0; t2 < kn2; t2++) {
        __m512bh vv[4];
        for (int i = 0; i < nv; i++) vv[i] = (__m512bh)_mm512_loadu_si512(vp + t2 * hd + i * 16);
        for (int r = 0; r < rb; r++) {
            const __m512bh pb = (__m512bh)_mm512_set1_epi32((int)pp[r * KT / 2 + t2]);
            for (int i = 0; i < nv; i++) a[r][i] = _mm512_dpbf16_ps(a[r][i], vv[i], pb);
        }
    }
    for (int r = 0; r < rb; r++)
        for (int i = 0; i < nv; i++) _mm512_storeu_ps(o + r * hd + i * 16, a[r][i]);
}
#else
#define DOT 0
#endif

#define RB_SWITCH(rb, call) \
    switch (rb) {           \
    case 4: call(4); break; \
    case 3: call(3); break; \
    case 2: call(2); break; \
    default: call(1);       \
    }

/* Keys [first, first + KT * chunks) of one KV head, packed from the cache: kt[d][t] transposed and v[t][d], in
 * float32, zero past len (the tiles' tails read them, masked). This fills chunk c's KT keys. */
static inline __attribute__((always_inline)) void pack_chunk(const void* k, const void* v, int kdt, int64_t n_kv,
                                                            int64_t kvh, int64_t hd, const int64_t* table, int64_t bs,
                                                            int64_t first, int64_t len, int64_t ld, int64_t c,
                                                            float* kt, float* vt, int dot) {
    if (dot) { /* bf16 pairs (score_block_dp): keys kp[d / 2][j], values vp[j / 2][d] */
        uint16_t *kp = (uint16_t*)kt, *vp = (uint16_t*)vt;
        for (int64_t j = c * KT; j < (c + 1) * KT; j++) {
            const int64_t t = first + j;
            const uint16_t* kr = (const uint16_t*)k + ((t < len ? table[t / bs] * bs + t % bs : 0) * n_kv + kvh) * hd;
            const uint16_t* vr = (const uint16_t*)v + (kr - (const uint16_t*)k);
            for (int64_t d = 0; d < hd; d++) {
                kp[(d / 2 * ld + j) * 2 + d % 2] = t < len ? kr[d] : 0;
                vp[(j / 2 * hd + d) * 2 + j % 2] = t < len ? vr[d] : 0;
            }
        }
        return;
    }
    for (int64_t j = c * KT; j < (c + 1) * KT; j++) {
        const int64_t t = first + j;
        if (t >= len) {
            for (int64_t d = 0; d < hd; d++) kt[d * ld + j] = 0.0f;
            memset(vt + j * hd, 0, sizeof(float) * (size_t)hd);
            continue;
        }
        const int64_t row = ((table[t / bs] * bs + t % bs) * n_kv + kvh) * hd;
        for (int64_t d = 0; d < hd; d += LANES) {
            const vec x = vloadw(k, kdt, row + d);
            float tmp[LANES];
            vstore(tmp, x);
            for (int i = 0; i < LANES; i++) kt[(d + i) * ld + j] = tmp[i];
            vstore(vt + j * hd + d, vloadw(v, kdt, row + d));
        }
    }
}

/* Row m's scores s[0, KT) of keys t0 .. t0 + KT - 1 for a query at position pos: soft-capped, masked outside the
 * keys it attends, then exp(s - new max) rounded to rdt, and the running max *mx, sum *l and output o (hd) brought
 * to the new max (flash attention's online softmax). A row that attends none of these keys gets zero weights. */
static inline __attribute__((always_inline)) void online_softmax(float* s, int64_t t0, int64_t pos, int64_t window,
                                                                float cap, int rdt, float* mx, float* l, float* o,
                                                                int64_t hd) {
    int64_t lo = window_start(pos + 1, window) - t0, hi = pos + 1 - t0;
    lo = lo < 0 ? 0 : lo;
    hi = hi > KT ? KT : hi;
    if (lo >= hi) {
        memset(s, 0, sizeof(float) * KT);
        return;
    }
    if (cap > 0) softcap_row(s, KT, cap);
    for (int64_t j = 0; j < lo; j++) s[j] = -INFINITY;
    for (int64_t j = hi; j < KT; j++) s[j] = -INFINITY;
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < KT; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(s + j));
    float m = hmax8(m8);
    m = *mx > m ? *mx : m;
    const __m256 sum8 = exp_rounded(s, KT, m, rdt);
    if (m != *mx) { /* the running sums were against a smaller max */
        const float corr = expf(*mx - m);
        *l *= corr;
        const vec c = vset1(corr);
        for (int64_t d = 0; d < hd; d += LANES) vstore(o + d, vmul(vload(o + d), c));
        *mx = m;
    }
    *l += hsum(sum8);
}

/* One task: query rows i0 .. i1 - 1 of a sequence (positions pos0 + i) and the group of query heads of KV head kvh,
 * tile rows m = (i - i0) * group + j for query head kvh * group + j; its KV head's packed keys kt (row stride ld)
 * and values vt, from key `first`. scratch: rows * (2 hd + KT + 2) floats. */
static inline __attribute__((always_inline)) void task(const void* q, int dt, int rdt, int64_t n_h, int64_t group,
                                                      int64_t hd, int64_t kvh, int64_t qrow, int64_t pos0, int64_t i0,
                                                      int64_t i1, const float* kt, const float* vt, int64_t ld,
                                                      int64_t first, float scale, int64_t window, float cap,
                                                      const float* sinks, void* out, float* scratch, int dot) {
    const int64_t rows = (i1 - i0) * group;
    float *qf = scratch, *o = qf + rows * hd, *s = o + rows * hd, *mx = s + rows * KT, *l = mx + rows;
#if DOT
    uint32_t* pp = (uint32_t*)(l + rows); /* dot: the weights' pairs [rows][KT / 2] */
#endif
    for (int64_t m = 0; m < rows; m++) {
        const int64_t h = kvh * group + m % group, at = (qrow + i0 + m / group) * n_h * hd + h * hd;
        if (dot) memcpy((uint16_t*)qf + m * hd, (const uint16_t*)q + at, sizeof(uint16_t) * (size_t)hd); /* pairs */
        for (int64_t d = 0; d < hd; d += LANES) {
            if (!dot) vstore(qf + m * hd + d, vloadw(q, dt, at + d));
            vstore(o + m * hd + d, vzero());
        }
        mx[m] = sinks ? sinks[h] : -INFINITY; /* a sink joins the max and the sum from the start */
        l[m] = sinks ? 1.0f : 0.0f;
    }
    /* tiles from an even offset in the packed keys (dot's key pairs; a key before the window is masked) */
    const int64_t k_lo = first + ((window_start(pos0 + i0 + 1, window) - first) & ~(int64_t)1), k_hi = pos0 + i1;
    for (int64_t t0 = k_lo; t0 < k_hi; t0 += KT) {
        const float* kb = kt + (t0 - first);
        const float* vb = vt + (t0 - first) * hd;
        for (int64_t m0 = 0; m0 < rows; m0 += RB) {
            const int rb = rows - m0 < RB ? (int)(rows - m0) : RB;
#if DOT
            if (dot) {
#define SCORE(c) score_block_dp((const uint32_t*)qf + m0 * hd / 2, hd, (const uint32_t*)kt + (t0 - first), ld, c, scale, s + m0 * KT)
                RB_SWITCH(rb, SCORE)
#undef SCORE
                continue;
            }
#endif
            for (int64_t j = 0; j < KT; j += SN * LANES) {
#define SCORE(c) score_block(qf + m0 * hd, hd, kb + j, ld, c, scale, s + m0 * KT + j)
                RB_SWITCH(rb, SCORE)
#undef SCORE
            }
        }
        for (int64_t m = 0; m < rows; m++)
            online_softmax(s + m * KT, t0, pos0 + i0 + m / group, window, cap, rdt, mx + m, l + m, o + m * hd, hd);
        const int64_t kn = k_hi - t0 < KT ? k_hi - t0 : KT;
#if DOT
        if (dot) { /* the weights (bf16 values) in pairs, then the values' pairs from key pair (t0 - first) / 2 */
            for (int64_t m = 0; m < rows; m++)
                for (int64_t j = 0; j < KT; j += 32)
                    _mm512_storeu_si512(pp + m * KT / 2 + j / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + m * KT + j + 16),
                                                                                               _mm512_loadu_ps(s + m * KT + j)));
            const uint32_t* vpb = (const uint32_t*)vt + (t0 - first) / 2 * hd;
            for (int64_t m0 = 0; m0 < rows; m0 += RB) {
                const int rb = rows - m0 < RB ? (int)(rows - m0) : RB;
                int64_t d = 0;
                for (; d + 64 <= hd; d += 64) {
#define VALUE(c) value_block_dp(pp + m0 * KT / 2, vpb + d, hd, (kn + 1) / 2, c, 4, o + m0 * hd + d)
                    RB_SWITCH(rb, VALUE)
#undef VALUE
                }
                for (; d < hd; d += 16) {
#define VALUE(c) value_block_dp(pp + m0 * KT / 2, vpb + d, hd, (kn + 1) / 2, c, 1, o + m0 * hd + d)
                    RB_SWITCH(rb, VALUE)
#undef VALUE
                }
            }
            continue;
        }
#endif
        for (int64_t m0 = 0; m0 < rows; m0 += RB) {
            const int rb = rows - m0 < RB ? (int)(rows - m0) : RB;
            int64_t d = 0;
            for (; d + SN * LANES <= hd; d += SN * LANES) {
#define VALUE(c) value_block(s + m0 * KT, vb + d, hd, kn, c, SN, o + m0 * hd + d)
                RB_SWITCH(rb, VALUE)
#undef VALUE
            }
            for (; d < hd; d += LANES) {
#define VALUE(c) value_block(s + m0 * KT, vb + d, hd, kn, c, 1, o + m0 * hd + d)
                RB_SWITCH(rb, VALUE)
#undef VALUE
            }
        }
    }
    for (int64_t m = 0; m < rows; m++) {
        const int64_t h = kvh * group + m % group, at = (qrow + i0 + m / group) * n_h * hd + h * hd;
        const float inv = 1.0f / l[m];
        for (int64_t d = 0; d < hd; d++) store1(out, dt, at + d, rnd(o[m * hd + d] * inv, rdt));
    }
}

/* Returns 0; -1 when hd is not a multiple of the vector lanes (or above 512), a length is out of range or memory
 * runs out (nothing was written then, or the caller's torch path overwrites it). tables: [G][n_blk] int64;
 * kv_lens, q_start, q_lens: [G] int64. */
int trtserve_prompt_attention(const void* q, const void* k, const void* v, int dt, int kdt, int64_t G, int64_t n_kv,
                              int64_t group, int64_t hd, const int64_t* tables, int64_t n_blk,
                              const int64_t* kv_lens, const int64_t* q_start, const int64_t* q_lens, int64_t bs,
                              float scale, int64_t window, float cap, const float* sinks, void* out, int threads) {
    if (hd % LANES || hd > 512 || dt < F32 || dt > F16 || !cache_dtype_ok(dt, kdt) || G < 1) return -1;
    int64_t n_tasks = 0, floats = 0, chunks = 0;
    for (int64_t g = 0; g < G; g++) {
        if (q_lens[g] < 1 || kv_lens[g] < q_lens[g] || kv_lens[g] > n_blk * bs || q_start[g] < 0) return -1;
        n_tasks += (q_lens[g] + QT - 1) / QT * n_kv;
    }
    int64_t* at = malloc(sizeof(int64_t) * (size_t)(3 * G));  /* per sequence: first key, packed row length, base */
    task_t* tasks = malloc(sizeof(task_t) * (size_t)n_tasks);
    if (!at || !tasks) {
        free(at);
        free(tasks);
        return -1;
    }
    for (int64_t g = 0, n = 0; g < G; g++) {
        const int64_t pos0 = kv_lens[g] - q_lens[g], first = window_start(pos0 + 1, window);
        const int64_t ld = (kv_lens[g] - first + KT - 1) / KT * KT + KT; /* + a tile: a task's last tile may overhang */
        at[3 * g] = first, at[3 * g + 1] = ld, at[3 * g + 2] = floats;
        floats += 2 * ld * hd * n_kv;
        chunks = ld / KT > chunks ? ld / KT : chunks;
        for (int64_t i0 = 0; i0 < q_lens[g]; i0 += QT) {
            const int64_t i1 = i0 + QT < q_lens[g] ? i0 + QT : q_lens[g];
            const int64_t keys = pos0 + i1 - window_start(pos0 + i0 + 1, window);
            for (int64_t kvh = 0; kvh < n_kv; kvh++) tasks[n++] = (task_t){g, kvh, i0, i1, keys * (i1 - i0)};
        }
    }
    qsort(tasks, (size_t)n_tasks, sizeof(task_t), by_cost);
    float* packed = malloc(sizeof(float) * (size_t)floats);
    if (!packed) {
        free(at);
        free(tasks);
        return -1;
    }
    const int64_t rows = QT * group;
    const int dot = DOT && LANES == 16 && dt == BF16 && kdt == BF16; /* a bf16 model's bf16 cache */
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(dynamic, 4)
        for (int64_t w = 0; w < G * n_kv * chunks; w++) {
            const int64_t g = w / (n_kv * chunks), kvh = w / chunks % n_kv, c = w % chunks, ld = at[3 * g + 1];
            if (c >= ld / KT) continue;
            float* kt = packed + at[3 * g + 2] + 2 * kvh * ld * hd;
#define PACK(kd) pack_chunk(k, v, kd, n_kv, kvh, hd, tables + g * n_blk, bs, at[3 * g], kv_lens[g], ld, c, kt, kt + ld * hd, dot)
            BY_WDTYPE(kdt, PACK)
#undef PACK
        }
        float* scratch = malloc(sizeof(float) * (size_t)(rows * (2 * hd + KT + 2 + KT / 2)));
        if (!scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic)
        for (int64_t w = 0; w < n_tasks; w++) {
            if (!scratch) continue;
            const task_t tk = tasks[w];
            const int64_t g = tk.g, ld = at[3 * g + 1];
            const float* kt = packed + at[3 * g + 2] + 2 * tk.kvh * ld * hd;
#define TASK(d, dp) task(q, d, d, n_kv * group, group, hd, tk.kvh, q_start[g], kv_lens[g] - q_lens[g], tk.i0, tk.i1, kt, kt + ld * hd, ld, at[3 * g], scale, window, cap, sinks, out, scratch, dp)
            if (dt == F32) TASK(F32, 0); /* the keys are packed in float32 whatever the cache's dtype */
            else if (dot) TASK(BF16, 1);
            else if (dt == BF16) TASK(BF16, 0);
            else TASK(F16, 0);
#undef TASK
        }
        free(scratch);
    }
    free(packed);
    free(at);
    free(tasks);
    return failed ? -1 : 0;
}
