/* One layer's mixture of experts for a few rows, shared by experts.c (one layer a call, prefill and the
 * op-by-op decode) and decode_layers.c (every layer of a decode step in one call): route, group the rows
 * by expert, run each expert the rows use once over its rows (a grouped GEMM: gemv.h's blocks, or int4.h's
 * units), combine.
 *
 * Why: a token reads only its top-k experts' weights, so a decode step of one sequence streams k of E
 * experts; the torch path's dozens of small ops per layer (topk, argsort, gathers, one GEMM per expert)
 * cost more than those reads at decode sizes.
 *
 * Numerics are models/moe.py's torch path (and so HF transformers'): router logits (+ bias), each GEMM's
 * output (+ bias), the activation's every op, each expert's weighted output and the sum all rounded to the
 * model dtype dt; softmax, top-k and the renormalisation in float32; a row adds its experts in expert order
 * (HF's loop), then the shared expert (Qwen2-MoE) times sigmoid of its gate. Each GEMM is the dense or int4
 * kernel's (gemv.h's gemm_block, int4.h's int4_unit, as the per-op linears run them). Every sum of a row is
 * independent of the others'.
 *
 * Layouts (dt: 0 float32, 1 bfloat16, 2 float16; weights (out, in)):
 *   gates [E (+1)][H] in dt: the router's rows, then the shared expert's gate row where S > 0
 *   fc_gate[g] [2W][H] (expert g's [fc; gate]), proj[g] [H][W] in wdt: dt, int8 (I8, float32 scales per
 *   output) or torch's CPU int4 pack (I4, int4.h: scales and zeros [K/gs][N][2] in dt); g = E is the shared
 *   expert (W = S; S = 0: none), the others' W = I
 *   biases (or NULL) in dt: the router's [E], the experts' fc_gate [E][2I], proj [E][H]
 *   x [M][H] float32 holding dt-rounded values; the output [M][H] in odt
 */
#ifndef TRTSERVE_EXPERTS_H
#define TRTSERVE_EXPERTS_H
#include <math.h>

#include "gemv.h"
#include "int4.h"
#include "pointwise.h"

typedef struct { /* one layer's experts (models/moe.py's Experts, packed by kernels/experts.py) */
    const void* gates;
    const void *const *fc_gate, *const *proj;     /* [E (+1)] each expert's weights, the shared one's last */
    const void *const *fc_gate_s, *const *proj_s; /* [E (+1)] their scales (I8, I4), or NULL (plain) */
    const void *gates_b, *fc_gate_b, *proj_b;     /* biases in dt, or NULL */
    int64_t E, k, I, S, renorm; /* experts, of them per row, each one's width, the shared one's (0: none) */
    int64_t wdt, gs, bn;        /* the experts' weight dtype (dt, I8 or I4) and an int4 pack's group and block */
    int64_t top_softmax;        /* 1: softmax over each row's top-k logits (gpt-oss); 0: top k of the softmax */
    float alpha, limit;         /* limit > 0: the clamped SwiGLU (gpt-oss); 0: SiLU(fc) * gate */
} experts_t;

/* Whether experts e fit this kernel for rows of width H in dt: sizes in range, an int4 pack's blocks and
 * groups dividing every width (as int4_gemm.c needs), never int4 with float16. */
static inline int experts_ok(const experts_t* e, int64_t H, int dt) {
    if (e->E < 1 || e->k < 1 || e->k > e->E || e->k > 64 || e->I < 1 || e->S < 0) return 0;
    if (e->wdt != I4) return e->wdt == dt || e->wdt == I8;
    const int64_t gs = e->gs;
    return dt != F16 && gs > 0 && H % gs == 0 && e->I % gs == 0 && e->S % gs == 0 && int4_block_ok(e->bn, H) &&
           int4_block_ok(e->bn, 2 * e->I) && (!e->S || int4_block_ok(e->bn, 2 * e->S));
}

typedef struct { /* a call's scratch for M rows (experts_scratch carves it) */
    float *logits, *xg, *fg, *act, *yo, *sel_w, *gw, *xsum;
    int64_t *sel_e, *gtok, *rowof, *start, *count, *first, *active, *n_active, *gexp;
} moe_buf_t;

/* int4: the group sums of the widest rows either GEMM reads ([R + M][widest / gs]); else none. */
static inline int64_t experts_sums(const experts_t* e, int64_t M, int64_t H) {
    const int64_t W = e->I > e->S ? e->I : e->S;
    return e->wdt == I4 ? (M * e->k + M) * (H > W ? H : W) / e->gs : 0;
}

/* The bytes of scratch experts_block needs for M rows. */
static inline int64_t experts_scratch(const experts_t* e, int64_t M, int64_t H) {
    const int64_t R = M * e->k, G = e->E + 1;
    const int64_t floats = M * G + R * H + R * 3 * e->I + M * 3 * e->S + (R + M) * H + 2 * R + experts_sums(e, M, H);
    return 4 * floats + 8 * (4 * R + 4 * G + 2);
}

static inline moe_buf_t experts_carve(const experts_t* e, int64_t M, int64_t H, void* p) {
    const int64_t R = M * e->k, G = e->E + 1;
    moe_buf_t b;
    b.sel_e = p, b.gtok = b.sel_e + R, b.rowof = b.gtok + R, b.start = b.rowof + R, b.count = b.start + G;
    b.first = b.count + G, b.active = b.first + G + 1, b.n_active = b.active + G, b.gexp = b.n_active + 1;
    b.logits = (float*)(b.gexp + R), b.xg = b.logits + M * G, b.fg = b.xg + R * H;
    b.act = b.fg + R * 2 * e->I + M * 2 * e->S, b.yo = b.act + R * e->I + M * e->S;
    b.sel_w = b.yo + (R + M) * H, b.gw = b.sel_w + R, b.xsum = b.gw + R;
    return b;
}

/* Row m's top k of E logits (+ bias, rounded to dt) and their weights rounded to dt: the larger first, the
 * lower expert on a tie (torch.topk); the weights the softmax over all E, renormalised where asked, or
 * (top_softmax) the softmax over the k; float32 throughout. */
static inline void route_row(const experts_t* e, float* logit, int64_t* sel, float* w, int dt) {
    const int64_t E = e->E, k = e->k;
    if (e->gates_b)
        for (int64_t i = 0; i < E; i++) logit[i] = rnd(logit[i] + load1(e->gates_b, dt, i), dt);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < E; i++) {
            int taken = 0;
            for (int64_t q = 0; q < j; q++) taken |= sel[q] == i;
            if (!taken && (best < 0 || logit[i] > logit[best])) best = i;
        }
        sel[j] = best;
    }
    float mx = logit[sel[0]], sum = 0, top = 0;
    for (int64_t i = 0; i < (e->top_softmax ? k : E); i++) sum += expf(logit[e->top_softmax ? sel[i] : i] - mx);
    for (int64_t j = 0; j < k; j++) w[j] = expf(logit[sel[j]] - mx) / sum, top += w[j];
    for (int64_t j = 0; j < k; j++) w[j] = rnd(e->renorm && !e->top_softmax ? w[j] / top : w[j], dt);
}

/* The group of work item u (first[g] <= u < first[g + 1]) among the n active groups. */
static inline int64_t group_of(const int64_t* first, const int64_t* active, int64_t n, int64_t u) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (first[active[mid]] <= u) lo = mid;
        else hi = mid - 1;
    }
    return active[lo];
}

/* The work items of one GEMM of N outputs: gemm_block's blocks, or int4_unit's units. */
static inline int64_t expert_items(const experts_t* e, int64_t N) {
    return e->wdt == I4 ? int4_units(N, e->bn) : gemm_blocks(N);
}

/* Work item u of a grouped GEMM: one block (unit) of outputs of group g's weights over all of its rows
 * (plain and int8 in pieces of MAX_M rows; the block's weights stay in cache from the first piece on). */
static inline __attribute__((always_inline)) void grouped_block(const experts_t* e, const moe_buf_t* b,
                                                               const float* x, int64_t H, int64_t M, int64_t u,
                                                               int second, int dt) {
    const int64_t g = group_of(b->first, b->active, *b->n_active, u), blk = u - b->first[g];
    const int shared = g == e->E;
    const int64_t W = shared ? e->S : e->I, rows = b->count[g], R = M * e->k;
    const int64_t K = second ? W : H, N = second ? H : 2 * W, r0 = shared ? R : b->start[g];
    const void* w = (second ? e->proj : e->fc_gate)[g];
    const void* s = e->wdt == dt ? NULL : (second ? e->proj_s : e->fc_gate_s)[g];
    const float* in = second ? (shared ? b->act + R * e->I : b->act + r0 * W) : (shared ? x : b->xg + r0 * H);
    float* out = second ? b->yo + r0 * H : (shared ? b->fg + R * 2 * e->I : b->fg + r0 * 2 * W);
    if (e->wdt == I4) { /* the rows' group sums: [R][K / gs], then the shared expert's [M][K / gs] */
        const float* xs = b->xsum + (shared ? R * (second ? e->I : H) : r0 * K) / e->gs;
        int4_unit(blk, in, xs, rows, K, w, N, e->bn, s, dt, e->gs, out, F32, dt, NULL, NULL, NULL);
        return;
    }
    for (int64_t m0 = 0; m0 < rows; m0 += MAX_M) {
        const int64_t n = rows - m0 < MAX_M ? rows - m0 : MAX_M;
        if (e->wdt == I8) gemm_block(blk, in + m0 * K, NULL, n, K, w, N, I8, s, F32, out + m0 * N, dt);
        else gemm_block(blk, in + m0 * K, NULL, n, K, w, N, dt, NULL, F32, out + m0 * N, dt);
    }
}

/* Route the rows, group them by expert (stable: each group's rows in row order), list the active groups
 * and their work items. One thread. */
static inline void group_rows(const experts_t* e, const moe_buf_t* b, int64_t M) {
    const int64_t k = e->k, G = e->E + (e->S > 0);
    for (int64_t g = 0; g <= e->E; g++) b->count[g] = 0;
    for (int64_t i = 0; i < M * k; i++) b->count[b->sel_e[i]]++;
    b->count[e->E] = e->S > 0 ? M : 0;
    int64_t at = 0, n = 0, item = 0;
    for (int64_t g = 0; g < G; g++) {
        b->start[g] = at, at += g < e->E ? b->count[g] : 0;
        if (!b->count[g]) continue;
        b->active[n++] = g, b->first[g] = item;
        item += expert_items(e, 2 * (g < e->E ? e->I : e->S));
    }
    *b->n_active = n;
    b->first[e->E + 1] = item; /* the total, read by the caller */
    for (int64_t g = 0; g < e->E; g++) b->count[g] = 0; /* refilled as cursors below */
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t g = b->sel_e[m * k + j], r = b->start[g] + b->count[g]++;
            b->gtok[r] = m, b->gw[r] = b->sel_w[m * k + j], b->rowof[m * k + j] = r, b->gexp[r] = g;
        }
}

/* The item count of the second GEMM (proj: N = H for every group) from the first's grouping. */
static inline void regroup(const experts_t* e, const moe_buf_t* b, int64_t H) {
    int64_t item = 0;
    for (int64_t a = 0; a < *b->n_active; a++) b->first[b->active[a]] = item, item += expert_items(e, H);
    b->first[e->E + 1] = item;
}

/* The clamped SwiGLU on 8 lanes, as models/moe.py's torch ops round it: fc clamped above and gate both ways
 * at limit, then (gate + 1) * (fc * sigmoid(fc * alpha)), each op rounded to dt. */
static inline __attribute__((always_inline)) __m256 swiglu8(__m256 fc, __m256 gate, float alpha, float limit, int dt) {
    const __m256 lim = _mm256_set1_ps(limit), one = _mm256_set1_ps(1.0f);
    fc = rnd8(_mm256_min_ps(fc, lim), dt);
    gate = rnd8(_mm256_min_ps(_mm256_max_ps(gate, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim), dt);
    const __m256 t = rnd8(_mm256_mul_ps(fc, _mm256_set1_ps(alpha)), dt);
    const __m256 sig = rnd8(_mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), t)))), dt);
    return rnd8(_mm256_mul_ps(rnd8(_mm256_add_ps(gate, one), dt), rnd8(_mm256_mul_ps(fc, sig), dt)), dt);
}

/* a[i] for i < n of one row's activation from its [fc; gate] fg (W each; bias: expert's [2W] in dt or NULL),
 * 8 at a time through one function, so every element gets the same bits. */
static inline __attribute__((always_inline)) void act_row(const experts_t* e, const float* fg, const void* bias,
                                                         int64_t W, int64_t i0, int64_t n, float* a, int dt) {
    for (int64_t i = i0; i < i0 + n; i += 8) {
        const int64_t c = i0 + n - i < 8 ? i0 + n - i : 8;
        float f[8] = {0}, g[8] = {0}, v[8];
        for (int64_t j = 0; j < c; j++) {
            f[j] = fg[i + j], g[j] = fg[W + i + j];
            if (bias) f[j] = rnd(f[j] + load1(bias, dt, i + j), dt), g[j] = rnd(g[j] + load1(bias, dt, W + i + j), dt);
        }
        const __m256 fv = _mm256_loadu_ps(f), gv = _mm256_loadu_ps(g);
        _mm256_storeu_ps(v, e->limit > 0 ? swiglu8(fv, gv, e->alpha, e->limit, dt) : silu_mul8(fv, gv, dt));
        memcpy(a + i, v, sizeof(float) * (size_t)c);
    }
}

/* Row m of the output: its experts' weighted outputs (+ bias) added in expert order (HF's loop), then the
 * shared expert's times sigmoid of its gate; every product and sum rounded to dt. */
static inline __attribute__((always_inline)) void combine_row(const experts_t* e, const moe_buf_t* b, int64_t M,
                                                             int64_t H, int64_t m, void* out, int odt, int dt) {
    const int64_t k = e->k, G = e->E + (e->S > 0), R = M * k;
    int64_t rows[64], n = 0; /* the row's grouped rows in expert order (groups are in expert order) */
    for (int64_t j = 0; j < k; j++) {
        int64_t r = b->rowof[m * k + j], q = n++;
        for (; q > 0 && rows[q - 1] > r; q--) rows[q] = rows[q - 1];
        rows[q] = r;
    }
    const float gate = e->S ? rnd(1.0f / (1.0f + expf(-b->logits[m * G + e->E])), dt) : 0;
    for (int64_t i = 0; i < H; i++) {
        float acc = 0;
        for (int64_t j = 0; j < k; j++) {
            float y = b->yo[rows[j] * H + i];
            if (e->proj_b) y = rnd(y + load1(e->proj_b, dt, b->gexp[rows[j]] * H + i), dt);
            acc = rnd(acc + rnd(y * b->gw[rows[j]], dt), dt);
        }
        if (e->S) acc = rnd(acc + rnd(gate * b->yo[(R + m) * H + i], dt), dt);
        store1(out, odt, m * H + i, acc);
    }
}

/* The sums of row r's groups of gs inputs for int4_unit: r < R grouped rows of width K, then M rows of Ks. */
static inline void group_sums(const experts_t* e, const float* rows, const float* shared_rows, int64_t R, int64_t K,
                              int64_t Ks, int64_t r, float* xsum) {
    const int64_t gs = e->gs, n = (r < R ? K : Ks) / gs;
    const float* row = r < R ? rows + r * K : shared_rows + (r - R) * Ks;
    float* s = xsum + (r < R ? r * K : R * K + (r - R) * Ks) / gs;
    for (int64_t g = 0; g < n; g++) s[g] = int4_group_sum(row + g * gs, gs);
}

/* out = the layer's experts on x [M][H]; inside a parallel region (work-shared, every thread calls it). */
static inline __attribute__((always_inline)) void experts_block(const experts_t* e, const float* x, int64_t M,
                                                               int64_t H, void* out, int odt, void* scratch,
                                                               int dt) {
    const moe_buf_t b = experts_carve(e, M, H, scratch);
    const int64_t k = e->k, G = e->E + (e->S > 0), R = M * k, I = e->I, S = e->S;
    const int64_t sums = e->wdt == I4 ? R + (S ? M : 0) : 0; /* rows whose group sums int4_unit reads */
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < gemm_blocks(G); blk++) /* the router's logits, MAX_M rows at a time */
        for (int64_t r0 = 0; r0 < M; r0 += MAX_M)
            gemm_block(blk, x + r0 * H, NULL, M - r0 < MAX_M ? M - r0 : MAX_M, H, e->gates, G, dt, NULL, F32,
                       b.logits + r0 * G, dt);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) route_row(e, b.logits + m * G, b.sel_e + m * k, b.sel_w + m * k, dt);
#pragma omp single
    group_rows(e, &b, M);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < (R > sums ? R : sums); r++) {
        if (r < R) memcpy(b.xg + r * H, x + b.gtok[r] * H, sizeof(float) * (size_t)H);
        if (r < sums) group_sums(e, b.xg, x, R, H, H, r, b.xsum);
    }
    const int64_t items = b.first[e->E + 1]; /* grouped_block reads the shared first / active tables */
#pragma omp for schedule(static)
    for (int64_t u = 0; u < items; u++) grouped_block(e, &b, x, H, M, u, 0, dt);
    const int64_t chunks = (I + 63) / 64, s_chunks = (S + 63) / 64;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < R * chunks + M * s_chunks; c++) { /* 64 outputs of one row a work item */
        const int shared = c >= R * chunks;
        const int64_t W = shared ? S : I, per = shared ? s_chunks : chunks, cc = shared ? c - R * chunks : c;
        const int64_t row = cc / per, i0 = cc % per * 64, n = W - i0 < 64 ? W - i0 : 64;
        const float* fg = (shared ? b.fg + R * 2 * I : b.fg) + row * 2 * W;
        const void* bias = !shared && e->fc_gate_b ? (const char*)e->fc_gate_b + b.gexp[row] * 2 * I * (dt == F32 ? 4 : 2) : NULL;
        act_row(e, fg, bias, W, i0, n, (shared ? b.act + R * I : b.act) + row * W, dt);
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < sums; r++) group_sums(e, b.act, b.act + R * I, R, I, S, r, b.xsum);
#pragma omp single
    regroup(e, &b, H);
    const int64_t items2 = b.first[e->E + 1];
#pragma omp for schedule(static)
    for (int64_t u = 0; u < items2; u++) grouped_block(e, &b, x, H, M, u, 1, dt);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) combine_row(e, &b, M, H, m, out, odt, dt);
}

/* experts_block for a dtype known at run time: one copy per dtype, so a caller specialised many ways
 * (decode_layers.c's layers) does not inline a copy into each (that multiplied its compile time). */
static __attribute__((noinline)) void experts_any(const experts_t* e, const float* x, int64_t M, int64_t H, void* out,
                                                  int odt, void* scratch, int dt) {
    if (dt == F32) experts_block(e, x, M, H, out, odt, scratch, F32);
    else if (dt == BF16) experts_block(e, x, M, H, out, odt, scratch, BF16);
    else experts_block(e, x, M, H, out, odt, scratch, F16);
}

#endif
