/* Every decoder layer of a decode step in one call, on x86-64 with AVX2 + FMA + F16C: for a few
 * sequences with one new token each, RMSNorm, the qkv GEMM (+ bias), q/k RMSNorm (where the model has it),
 * RoPE and the KV-cache write, attention over the paged cache (within the layer's window, soft-capped, with
 * sinks where the model has them), the output projection (+ bias), its norm (Gemma's sandwich) and scaled
 * residual, RMSNorm, the fc/gate GEMM, SiLU (or GeLU) * gate, the down projection, its norm and residual,
 * layer after layer. What differs between families is data: the layer's fields and the step's constants.
 *
 * Why: with each of these a call of its own (dense_gemv.c, pointwise.c, decode_attention.c) a
 * small model's step made hundreds of calls from Python into C, each with its own parallel region,
 * and their dispatch rivalled the weight reads. Here one parallel region covers the whole step and
 * the stages meet at OpenMP barriers.
 *
 * Numerics are the per-op kernels' (and so HF transformers'): every stage's output is rounded to
 * the model dtype; the scratch buffers hold those rounded values in float32.
 *
 * Layouts (dtype dt for h, norms and tables: 0 float32, 1 bfloat16, 2 float16; the cache's kdt is dt, or
 * bfloat16 or float16 under a float32 dt: keys and values rounded to it as stored, widened as read):
 *   h [M][H], the residual stream, updated in place; row m is sequence m's token at pos[m],
 *   written to cache slot slots[m], attending keys 0..pos[m] through tables[m][n_blk]
 *   layers[l]: weights (out, in) in dt, or in int8 (wdt 3, W8A16) with float32 scales per output,
 *   or torch's CPU int4 pack (wdt 4, W4A16; int4.h) with scales and zeros per group of gs inputs:
 *   qkv [(n_h + 2 n_kv) hd][H], dense [H][n_h hd], fc_gate [2I][H] ([fc; gate]), proj [H][I];
 *   norms [H] in dt, scaling by (offset + w) in float32 where offset is set (Gemma); biases (or NULL) of the
 *   outputs in dt; q_norm [hd or n_h hd], k_norm [hd or n_kv hd] or NULL; attn_out_norm, mlp_out_norm [H] or NULL;
 *   sinks [n_h] float32 or NULL; cos, sin [table rows][rot] (NeoX, sign in the sin table; a layer's own base
 *   where it has one; NULL: no RoPE), row rows[m] for sequence m (its position, or LongRoPE's long half)
 *   a layer with experts (moe, else NULL; experts.h: plain, int8 or int4 weights) runs them in place of fc_gate and proj
 *   kv [layers][2][slots][n_kv][hd]
 *   LoRA (or NULL): lora[l] the step's adapters side by side per linear (models/lora_step.py: A [C][in],
 *   B^T [C][out] in dt), spans [M][4][2] each row's own columns [c0, c1) of each linear (c0 == c1: none)
 * Built and loaded by trtserve/kernels/decode_layers.py; it shares torch's OpenMP runtime.
 */
#include <omp.h>
#include <stdlib.h>

#include "amx.h"
#include "attention.h"
#include "experts.h"
#include "gemv.h"
#include "int4.h"
#include "pointwise.h"

typedef struct { /* one layer's weights; biases may be NULL, scales are NULL unless weights are int8 */
    const void *in_norm, *qkv, *qkv_b, *dense, *post_norm, *fc_gate, *fc_gate_b, *proj, *proj_b;
    const float *qkv_s, *dense_s, *fc_gate_s, *proj_s;
    const void *qkv_sz, *dense_sz, *fc_gate_sz, *proj_sz; /* int4: [K/gs][N][2] scale, zero in dt; else NULL */
    int64_t gs, bn;                                       /* int4: inputs per group, outputs per pack block */
    int64_t q8; /* int4: int8 activations (int4.h's INT4_Q8 path) where built, for 64-output blocks */
    const experts_t* moe; /* the layer's experts in place of its MLP (their own weight dtype); NULL: dense */
    const void *q_norm, *k_norm; /* RMSNorm of q and k before RoPE in dt, or NULL (pointwise.h's qk_norm_chunk) */
    int64_t qn, kn;              /* their widths: hd (per head) or all q's (k's) heads */
    const void *attn_out_norm, *mlp_out_norm; /* attention's, the MLP's output normed before its add, or NULL */
    const void *cos, *sin;                    /* the layer's RoPE tables in dt; NULL: it rotates nothing */
    int64_t window;                           /* keys a query attends, itself included; 0: every key */
    const float* sinks;                       /* a logit per query head joining its softmax, or NULL */
    const void* dense_b;                      /* the output projection's bias in dt, or NULL */
} layer_t;

typedef struct { /* one layer's LoRA updates, linears in LINEARS order (qkv, dense, fc_gate, proj) */
    const void *a[4], *bt[4]; /* A [C][in], B^T [C][out] in dt; NULL where no adapter of the step targets it */
    int64_t width[4];         /* C */
} lora_t;

typedef struct {
    int64_t M, H, n_h, n_kv, hd, I, n_slots, n_blk, bs;
    split_t split; /* attention's tasks */
    float eps, scale;
    float offset, resid, cap; /* norms' weight offset, blocks' residual factor, scores' soft-cap (0: none) */
    int act;                  /* the MLP's activation (pointwise.h's SILU, GELU_TANH) */
    int64_t rot;              /* each head's rotated dims (the tables' width) */
    const int64_t *rows, *pos, *slots, *tables;
    const lora_t* lora; /* [layers] or NULL */
    const int64_t* spans;
    float* lora_tmp; /* scratch: [M][widest C] */
    void* moe_tmp;   /* scratch: the largest experts_scratch of the layers with experts */
    uint16_t* xv;    /* scratch for amx.h's packed x where bf16 weights run on AMX, else NULL */
    uint16_t* xb;    /* scratch for x as bf16 where gemv.h's tiles read it so (dot_x), else NULL */
} step_t;

/* Work-shared y = (x w^T) * scale, y float32 holding dt-rounded values, w dense in wdt; xv: NULL, or scratch
 * for amx.h's packed x, where bf16 weights run on AMX; xb: NULL, or scratch for x as bf16 (gemv.h's dot_x). One
 * copy per weight dtype, not one per call site and model dtype: the GEMM's tiles are most of this file's compile
 * time. */
static __attribute__((noinline)) void dense_blocks(const float* x, int64_t M, int64_t K, const void* w, int wdt,
                                                   const float* scale, int64_t N, float* y, int dt, uint16_t* xv,
                                                   uint16_t* xb) {
#define BLOCKS(wt)                                                                                  \
    _Pragma("omp for schedule(static)") for (int64_t b = 0; b < gemm_blocks(N); b++)                \
        gemm_block(b, x, xb, M, K, w, N, wt, scale, F32, y, dt);
    switch (wdt) {
    case F32: BLOCKS(F32) break;
    case BF16:
#if AMX
        if (xv) {
            amx_gemm(x, F32, M, K, w, N, xv, F32, y, dt);
            break;
        }
#endif
        if (xb) { /* x as bf16 once, for every block's tiles */
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) pack_bf16(x, m * K, (m + 1) * K, xb);
        }
        BLOCKS(BF16) break;
    case F16: BLOCKS(F16) break;
    default: BLOCKS(I8)
    }
#undef BLOCKS
}

/* Work-shared y = (x w^T) * scale (+ bias) into float32 y holding dt-rounded values; w in wdt. int4 (sz, gs,
 * bn, q8; xsum: [M][K] floats of scratch) as int4_gemm.c computes it: the group sums (or, q8, x rounded to
 * int8 with its sums and scales), then a unit of outputs a work item. */
static inline __attribute__((always_inline)) void linear(const float* x, int64_t M, int64_t K, const void* w,
                                                        int wdt, const float* scale, const void* sz, int64_t gs,
                                                        int64_t bn, int64_t q8, float* xsum, uint16_t* xv,
                                                        uint16_t* xb, const void* bias, int64_t N, float* y, int dt) {
    if (wdt == I4) {
        const int64_t ng = K / gs;
        q8 = q8 && int4_q8_ok(bn, gs);
        int32_t* xqs = (int32_t*)(xsum + M * ng); /* q8: xsum holds the scales */
        int8_t* xq = (int8_t*)(xqs + M * ng);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < M * ng; i++) int4_prepare_group(x, i, K, gs, (int)q8, xsum, xqs, xq);
#pragma omp for schedule(static)
        for (int64_t u = 0; u < int4_units(N, bn); u++)
            int4_unit(u, x, xsum, M, K, w, N, bn, sz, dt, gs, y, F32, dt, q8 ? xq : NULL, xqs, xsum);
    } else {
        dense_blocks(x, M, K, w, wdt, scale, N, y, dt, xv, xb);
    }
    if (bias) {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < M * N; i++) y[i] = rnd(y[i] + load1(bias, dt, i % N), dt);
    }
}

/* y += (t B^T) on each row's own columns of the step's adapters, t = x A^T rounded to dt (as the per-op
 * path's linear rounds it), the update added and rounded once (its addmm_). Linear `f` of layer l. A work
 * item is a column of A, then 64 columns of B^T, over every row: rows of one adapter read its weights
 * once a step (from the cache after the first), which is what the update costs at decode sizes. */
static inline __attribute__((always_inline)) void lora_update(const step_t* s, int64_t l, int f, const float* x,
                                                             int64_t K, float* y, int64_t N, int dt) {
    if (!s->lora || !s->lora[l].a[f]) return; /* the same for every thread: shared data */
    const void *a = s->lora[l].a[f], *bt = s->lora[l].bt[f];
    const int64_t C = s->lora[l].width[f], M = s->M, nb = (N + 63) / 64;
    float* t = s->lora_tmp;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        for (int64_t m = 0; m < M; m++) {
            const int64_t* sp = s->spans + (m * 4 + f) * 2;
            if (c < sp[0] || c >= sp[1]) continue;
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            int64_t k = 0;
            for (; k + 16 <= K; k += 16) {
                acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * K + k), load8(a, dt, c * K + k), acc0);
                acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * K + k + 8), load8(a, dt, c * K + k + 8), acc1);
            }
            float sum = hsum(_mm256_add_ps(acc0, acc1));
            for (; k < K; k++) sum += x[m * K + k] * load1(a, dt, c * K + k);
            t[m * C + c] = rnd(sum, dt);
        }
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < nb; u++) {
        const int64_t n0 = u * 64, n = N - n0 < 64 ? N - n0 : 64, full = n / 8;
        for (int64_t m = 0; m < M; m++) {
            const int64_t* sp = s->spans + (m * 4 + f) * 2;
            if (sp[0] == sp[1]) continue;
            __m256 acc[8];
            for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
            float sum[64] = {0};
            for (int64_t c = sp[0]; c < sp[1]; c++) {
                const float tc = t[m * C + c];
                const __m256 t8 = _mm256_set1_ps(tc);
                for (int64_t i = 0; i < full; i++) acc[i] = _mm256_fmadd_ps(t8, load8(bt, dt, c * N + n0 + 8 * i), acc[i]);
                for (int64_t i = 8 * full; i < n; i++) sum[i] += tc * load1(bt, dt, c * N + n0 + i);
            }
            for (int64_t i = 0; i < full; i++) _mm256_storeu_ps(sum + 8 * i, acc[i]);
            for (int64_t i = 0; i < n; i++) y[m * N + n0 + i] = rnd(y[m * N + n0 + i] + sum[i], dt);
        }
    }
}

/* A block's output rows d [M][H] as the residual adds them: normed by `norm` (or NULL), then times s->resid. */
static inline __attribute__((always_inline)) void block_out(const step_t* s, const void* norm, float* d, int dt) {
    if (!norm && s->resid == 1.0f) return; /* the same for every thread: shared data */
#pragma omp for schedule(static)
    for (int64_t m = 0; m < s->M; m++) {
        const int64_t H = s->H;
        if (norm) norm_row(d, F32, NULL, F32, m * H, H, norm, dt, s->eps, s->offset, d, F32);
        if (s->resid != 1.0f)
            for (int64_t i = 0; i < H; i++) d[m * H + i] = rnd(d[m * H + i] * s->resid, dt);
    }
}

/* Work-shared attention of every row's query heads (q, float32 rows) over layer w's cache (kdt), into att (float32
 * holding dt-rounded values). One copy per pair of dtypes. */
static __attribute__((noinline)) void attend(const step_t* s, const layer_t* w, const float* q, const void* k_cache,
                                             const void* v_cache, float* att, float* buf, int dt, int kdt) {
    const int64_t n_h = s->n_h, n_kv = s->n_kv, hd = s->hd, group = n_h / n_kv;
#define ATTEND(rdt, cdt)                                                                                            \
    _Pragma("omp for schedule(dynamic)") for (int64_t j = 0; j < s->M * s->split.per_seq; j++) {                     \
        const int64_t m = j / s->split.per_seq, h0 = j % s->split.per_seq * s->split.nr;                            \
        heads(q, F32, k_cache, v_cache, cdt, rdt, m * n_h * hd, n_kv, h0, group, s->split.nr, hd,                   \
              s->tables + m * s->n_blk, window_start(s->pos[m] + 1, w->window), s->pos[m] + 1, s->bs, s->scale,     \
              s->cap, w->sinks, att, buf);                                                                          \
    }
    /* dynamic: sequences' lengths differ, and a static split left one thread waiting */
    CACHE_PAIRS(dt, kdt, ATTEND)
#undef ATTEND
}

static inline __attribute__((always_inline)) void layers(const layer_t* L, int64_t n_layers, const step_t* s,
                                                        void* h, void* kv, float* scratch, float* att_buf, int dt,
                                                        int wdt, int kdt) {
    const int64_t M = s->M, H = s->H, n_h = s->n_h, n_kv = s->n_kv, hd = s->hd, I = s->I;
    const int64_t width = (n_h + 2 * n_kv) * hd, layer_kv = 2 * s->n_slots * n_kv * hd;
    const int64_t silu_chunks = (I + 63) / 64;
    float *x = scratch, *qkv = x + M * H, *q = qkv + M * width, *att = q + M * n_h * hd;
    float *d = att + M * n_h * hd, *fg = d + M * H, *a = fg + M * 2 * I, *xsum = a + M * I;
    for (int64_t l = 0; l < n_layers; l++) {
        const layer_t* w = L + l;
        char* k_cache = (char*)kv + (size_t)(l * layer_kv) * (kdt == F32 ? 4 : 2);
        char* v_cache = k_cache + (size_t)(layer_kv / 2) * (kdt == F32 ? 4 : 2);
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) /* the last layer's MLP output joins the residual first */
            norm_row(h, dt, l ? d : NULL, F32, m * H, H, w->in_norm, dt, s->eps, s->offset, x, F32);
        linear(x, M, H, w->qkv, wdt, w->qkv_s, w->qkv_sz, w->gs, w->bn, w->q8, xsum, s->xv, s->xb, w->qkv_b, width, qkv,
               dt);
        lora_update(s, l, 0, x, H, qkv, width, dt);
        if (w->q_norm) {
            const int64_t chunks = n_h * hd / w->qn + n_kv * hd / w->kn;
#pragma omp for schedule(static)
            for (int64_t j = 0; j < M * chunks; j++)
                qk_norm_chunk(qkv, F32, j / chunks * width, j % chunks, n_h, hd, w->q_norm, w->k_norm, w->qn, w->kn,
                              dt, s->eps, s->offset);
        }
#pragma omp for schedule(static)
        for (int64_t j = 0; j < M * (n_h + n_kv); j++) { /* q and k heads rotated; k and v to the cache */
            const int64_t m = j / (n_h + n_kv), head = j % (n_h + n_kv), src = m * width + head * hd;
            const int64_t rot = w->cos ? s->rot : 0, tab = s->rows[m] * rot;
            if (head < n_h) {
                rope_head(qkv, F32, src, q, F32, (m * n_h + head) * hd, w->cos, w->sin, tab, hd, rot, dt);
            } else {
                const int64_t dst = (s->slots[m] * n_kv + head - n_h) * hd;
                rope_head(qkv, F32, src, k_cache, kdt, dst, w->cos, w->sin, tab, hd, rot, dt);
                copy_row(qkv, F32, src + n_kv * hd, v_cache, kdt, dst, hd);
            }
        }
        attend(s, w, q, k_cache, v_cache, att, att_buf, dt, kdt);
        linear(att, M, n_h * hd, w->dense, wdt, w->dense_s, w->dense_sz, w->gs, w->bn, w->q8, xsum, s->xv, s->xb, w->dense_b,
               H, d, dt);
        lora_update(s, l, 1, att, n_h * hd, d, H, dt);
        block_out(s, w->attn_out_norm, d, dt);
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) norm_row(h, dt, d, F32, m * H, H, w->post_norm, dt, s->eps, s->offset, x, F32);
        if (w->moe) { /* the experts' output into d, as the MLP's */
            experts_any(w->moe, x, M, H, d, F32, s->moe_tmp, dt);
            continue;
        }
        linear(x, M, H, w->fc_gate, wdt, w->fc_gate_s, w->fc_gate_sz, w->gs, w->bn, w->q8, xsum, s->xv, s->xb, w->fc_gate_b,
               2 * I, fg, dt);
        lora_update(s, l, 2, x, H, fg, 2 * I, dt);
#pragma omp for schedule(static)
        for (int64_t c = 0; c < M * silu_chunks; c++) { /* 64 outputs of one row a work item */
            const int64_t m = c / silu_chunks, i0 = c % silu_chunks * 64, n = I - i0 < 64 ? I - i0 : 64;
            act_mul_row(fg, F32, m * 2 * I + i0, m * 2 * I + I + i0, a, F32, m * I + i0, n, s->act, dt);
        }
        linear(a, M, I, w->proj, wdt, w->proj_s, w->proj_sz, w->gs, w->bn, w->q8, xsum, s->xv, s->xb, w->proj_b, H, d, dt);
        lora_update(s, l, 3, a, I, d, H, dt);
        block_out(s, w->mlp_out_norm, d, dt);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M * H; i++) store1(h, dt, i, rnd(load1(h, dt, i) + d[i], dt));
}

/* Whether every int4 linear's pack and groups fit int4_unit (blocks divide N, groups divide K). */
static int int4_shapes_ok(const layer_t* L, int64_t n_layers, int64_t H, int64_t n_h, int64_t hd, int64_t I,
                          int64_t width) {
    for (int64_t l = 0; l < n_layers; l++) {
        const int64_t gs = L[l].gs, bn = L[l].bn;
        if (gs < 1 || H % gs || n_h * hd % gs || I % gs) return 0;
        if (!int4_block_ok(bn, width) || !int4_block_ok(bn, H) || !int4_block_ok(bn, 2 * I)) return 0;
    }
    return 1;
}

/* Returns 0; -1 (having changed nothing) when a size or dtype is out of range or memory runs out. */
int trtserve_decode_layers(const layer_t* L, int64_t n_layers, int dt, int wdt, int kdt, void* h, void* kv, int64_t M,
                           int64_t H, int64_t n_h, int64_t n_kv, int64_t hd, int64_t I, int64_t n_slots, float eps, float scale,
                           float offset, float resid, float cap, int act, int64_t rot, const int64_t* rows,
                           const int64_t* pos, const int64_t* slots,
                           const int64_t* tables, int64_t n_blk, int64_t bs, const lora_t* lora,
                           const int64_t* spans, int64_t lora_width, int threads) {
    if (dt < F32 || dt > F16 || (wdt != dt && wdt != I8 && wdt != I4) || M < 1 || M > MAX_M || hd % 8 || n_kv < 1 ||
        n_h % n_kv || n_layers < 1 || act < SILU || act > GELU_TANH || rot < 0 || rot > hd || rot % 2 ||
        !cache_dtype_ok(dt, kdt))
        return -1;
    if (wdt == I4 && (dt == F16 || !int4_shapes_ok(L, n_layers, H, n_h, hd, I, (n_h + 2 * n_kv) * hd))) return -1;
    int64_t moe_bytes = 0; /* experts: the widest scratch any layer's needs */
    for (int64_t l = 0; l < n_layers; l++) {
        if ((L[l].q_norm || L[l].k_norm) && !qk_norm_ok(L[l].q_norm, L[l].k_norm, L[l].qn, L[l].kn, n_h, n_kv, hd))
            return -1;
        if (L[l].window < 0 || (L[l].cos && !L[l].sin)) return -1;
        if (!L[l].moe) continue;
        const experts_t* e = L[l].moe;
        if (!experts_ok(e, H, dt)) return -1;
        moe_bytes = experts_scratch(e, M, H) > moe_bytes ? experts_scratch(e, M, H) : moe_bytes;
    }
    int64_t longest = 0;
    for (int64_t m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= n_blk * bs) return -1;
        longest = pos[m] + 1 > longest ? pos[m] + 1 : longest;
    }
    const split_t split = split_heads(M, n_kv, n_h / n_kv, threads);
    if (lora && (!spans || lora_width < 1)) return -1;
    float* lora_scratch = lora ? malloc(sizeof(float) * (size_t)(M * lora_width)) : NULL;
    void* moe_scratch = moe_bytes ? malloc((size_t)moe_bytes) : NULL;
    const int64_t width = (n_h + 2 * n_kv) * hd;
    const int64_t widest_in = H > n_h * hd ? (H > I ? H : I) : (n_h * hd > I ? n_h * hd : I); /* int4's xsum, x_q */
    uint16_t* xv = NULL;
#if AMX
    if (wdt == BF16 && M >= AMX_MIN_M && amx_permitted()) /* NULL if out of memory: gemv.h's tiles run instead */
        xv = malloc(sizeof(uint16_t) * (size_t)amx_pack_size(M, widest_in));
#endif
    uint16_t* xb = dot_x(wdt, dt) ? malloc(sizeof(uint16_t) * (size_t)(M * widest_in)) : NULL; /* NULL: converted per block */
    const step_t s = {M,     H,    n_h,   n_kv, hd,  I,    n_slots, n_blk,  bs,    split, eps,          scale,
                      offset, resid, cap, act, rot, rows, pos,     slots, tables, lora, spans, lora_scratch, moe_scratch,
                      xv,    xb};
    float* scratch = malloc(sizeof(float) * (size_t)(M * (2 * H + width + 2 * n_h * hd + 3 * I + widest_in)));
    const int64_t att_scratch = head_scratch(split.nr, longest, hd);
    float* att_bufs = malloc(sizeof(float) * (size_t)(threads * att_scratch));
    if (!scratch || !att_bufs || (lora && !lora_scratch) || (moe_bytes && !moe_scratch)) {
        free(moe_scratch);
        free(scratch);
        free(att_bufs);
        free(lora_scratch);
        return -1;
    }
#pragma omp parallel num_threads(threads)
    {
        float* buf = att_bufs + (size_t)(omp_get_thread_num() * att_scratch);
        /* one specialised copy per dtype, weights in it, in int8 or in int4 (never with float16) */
#define LAYERS(d, w) layers(L, n_layers, &s, h, kv, scratch, buf, d, w, kdt)
        switch (dt * 4 + (wdt == I8) + 2 * (wdt == I4)) {
        case F32 * 4: LAYERS(F32, F32); break;
        case F32 * 4 + 1: LAYERS(F32, I8); break;
        case F32 * 4 + 2: LAYERS(F32, I4); break;
        case BF16 * 4: LAYERS(BF16, BF16); break;
        case BF16 * 4 + 1: LAYERS(BF16, I8); break;
        case BF16 * 4 + 2: LAYERS(BF16, I4); break;
        case F16 * 4: LAYERS(F16, F16); break;
        default: LAYERS(F16, I8);
        }
#undef LAYERS
    }
    free(scratch);
    free(att_bufs);
    free(lora_scratch);
    free(moe_scratch);
    free(xv);
    free(xb);
    return 0;
}
