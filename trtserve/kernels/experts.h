/* One layer's mixture of experts for a few rows, shared by experts.c (one layer a call, prefill and the
 * op-by-op decode) and decode_layers.c (every layer of a decode step in one call): route, group the rows
 * by expert, run each expert the rows use once over its rows (a grouped GEMM, gemv.h's blocks), combine.
 *
 * Why: a token reads only its top-k experts' weights, so a decode step of one sequence streams k of E
 * experts; the torch path's dozens of small ops per layer (topk, argsort, gathers, one GEMM per expert)
 * cost more than those reads at decode sizes.
 *
 * Numerics are models/moe.py's torch path (and so HF transformers'): router logits, each GEMM's output,
 * SiLU * gate, each expert's weighted output and the sum all rounded to the model dtype dt; softmax, top-k
 * and the renormalisation in float32; a row adds its experts in expert order (HF's loop), then the shared
 * expert (Qwen2-MoE) times sigmoid of its gate. Every sum of a row is independent of the others'.
 *
 * Layouts (dt: 0 float32, 1 bfloat16, 2 float16; weights (out, in) in dt):
 *   gates [E (+1)][H]: the router's rows, then the shared expert's gate row where S > 0
 *   fc_gate [E][2I][H] (each expert's [fc; gate]), proj [E][H][I]
 *   shared_fc_gate [2S][H], shared_proj [H][S] (S = 0: no shared expert)
 *   x [M][H] float32 holding dt-rounded values; the output [M][H] in odt
 */
#ifndef TRTSERVE_EXPERTS_H
#define TRTSERVE_EXPERTS_H
#include <math.h>

#include "gemv.h"
#include "pointwise.h"

typedef struct { /* one layer's experts (models/moe.py's Experts) */
    const void *gates, *fc_gate, *proj, *shared_fc_gate, *shared_proj;
    int64_t E, k, I, S, renorm; /* experts, of them per row, each one's width, the shared one's (0: none) */
} experts_t;

typedef struct { /* a call's scratch for M rows (experts_scratch carves it) */
    float *logits, *xg, *fg, *act, *yo, *sel_w, *gw;
    int64_t *sel_e, *gtok, *rowof, *start, *count, *first, *active, *n_active;
} moe_buf_t;

/* The bytes of scratch experts_block needs for M rows. */
static inline int64_t experts_scratch(const experts_t* e, int64_t M, int64_t H) {
    const int64_t R = M * e->k, G = e->E + 1;
    const int64_t floats = M * G + R * H + R * 3 * e->I + M * 3 * e->S + (R + M) * H + 2 * R;
    return 4 * floats + 8 * (3 * R + 4 * G + 2);
}

static inline moe_buf_t experts_carve(const experts_t* e, int64_t M, int64_t H, void* p) {
    const int64_t R = M * e->k, G = e->E + 1;
    moe_buf_t b;
    b.sel_e = p, b.gtok = b.sel_e + R, b.rowof = b.gtok + R, b.start = b.rowof + R, b.count = b.start + G;
    b.first = b.count + G, b.active = b.first + G + 1, b.n_active = b.active + G;
    b.logits = (float*)(b.n_active + 1), b.xg = b.logits + M * G, b.fg = b.xg + R * H;
    b.act = b.fg + R * 2 * e->I + M * 2 * e->S, b.yo = b.act + R * e->I + M * e->S;
    b.sel_w = b.yo + (R + M) * H, b.gw = b.sel_w + R;
    return b;
}

/* Row m's top k of E logits (float32 softmax, as torch.topk of the probabilities: the larger first, the
 * lower expert on a tie), renormalised where asked, the weights rounded to dt. */
static inline void route_row(const float* logit, int64_t E, int64_t k, int64_t renorm, int64_t* sel, float* w,
                             int dt) {
    float mx = logit[0], sum = 0, top = 0;
    for (int64_t i = 1; i < E; i++) mx = logit[i] > mx ? logit[i] : mx;
    for (int64_t i = 0; i < E; i++) sum += expf(logit[i] - mx);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < E; i++) {
            int taken = 0;
            for (int64_t q = 0; q < j; q++) taken |= sel[q] == i;
            if (!taken && (best < 0 || logit[i] > logit[best])) best = i;
        }
        sel[j] = best, w[j] = expf(logit[best] - mx) / sum, top += w[j];
    }
    for (int64_t j = 0; j < k; j++) w[j] = rnd(renorm ? w[j] / top : w[j], dt);
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

/* Work item u of a grouped GEMM: one block of outputs of group g's weights over all of its rows (in
 * pieces of MAX_M rows; the block's weights stay in cache from the first piece on). */
static inline __attribute__((always_inline)) void grouped_block(const experts_t* e, const moe_buf_t* b,
                                                               const float* x, int64_t H, int64_t M, int64_t u,
                                                               int second, int dt) {
    const int64_t g = group_of(b->first, b->active, *b->n_active, u), blk = u - b->first[g];
    const int shared = g == e->E;
    const int64_t W = shared ? e->S : e->I, rows = b->count[g], R = M * e->k;
    const int64_t K = second ? W : H, N = second ? H : 2 * W, es = dt == F32 ? 4 : 2;
    const void* w = second ? e->shared_proj : e->shared_fc_gate;
    if (!shared) w = (const char*)(second ? e->proj : e->fc_gate) + (size_t)(g * N * K * es); /* expert g's */
    const float* in = second ? (shared ? b->act + R * e->I : b->act + b->start[g] * W)
                             : (shared ? x : b->xg + b->start[g] * H);
    float* out = second ? b->yo + (shared ? R : b->start[g]) * H : (shared ? b->fg + R * 2 * e->I : b->fg + b->start[g] * 2 * W);
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_M) {
        const int64_t n = rows - r0 < MAX_M ? rows - r0 : MAX_M;
        gemm_block(blk, in + r0 * K, n, K, w, N, dt, NULL, F32, out + r0 * N, dt);
    }
}

/* Route the rows, group them by expert (stable: each group's rows in row order), list the active groups
 * and their work items (blocks of N outputs each). One thread. */
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
        item += gemm_blocks(2 * (g < e->E ? e->I : e->S));
    }
    *b->n_active = n;
    b->first[e->E + 1] = item; /* the total, read by the caller */
    for (int64_t g = 0; g < e->E; g++) b->count[g] = 0; /* refilled as cursors below */
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t g = b->sel_e[m * k + j], r = b->start[g] + b->count[g]++;
            b->gtok[r] = m, b->gw[r] = b->sel_w[m * k + j], b->rowof[m * k + j] = r;
        }
}

/* The item count of the second GEMM (proj: N = H for every group) from the first's grouping. */
static inline void regroup(const experts_t* e, const moe_buf_t* b, int64_t H) {
    int64_t item = 0;
    for (int64_t a = 0; a < *b->n_active; a++) b->first[b->active[a]] = item, item += gemm_blocks(H);
    b->first[e->E + 1] = item;
}

/* Row m of the output: its experts' weighted outputs added in expert order (HF's loop), then the shared
 * expert's times sigmoid of its gate; every product and sum rounded to dt. */
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
        for (int64_t j = 0; j < k; j++) acc = rnd(acc + rnd(b->yo[rows[j] * H + i] * b->gw[rows[j]], dt), dt);
        if (e->S) acc = rnd(acc + rnd(gate * b->yo[(R + m) * H + i], dt), dt);
        store1(out, odt, m * H + i, acc);
    }
}

/* out = the layer's experts on x [M][H]; inside a parallel region (work-shared, every thread calls it). */
static inline __attribute__((always_inline)) void experts_block(const experts_t* e, const float* x, int64_t M,
                                                               int64_t H, void* out, int odt, void* scratch,
                                                               int dt) {
    const moe_buf_t b = experts_carve(e, M, H, scratch);
    const int64_t k = e->k, G = e->E + (e->S > 0), R = M * k, I = e->I, S = e->S;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < gemm_blocks(G); blk++) /* the router's logits, MAX_M rows at a time */
        for (int64_t r0 = 0; r0 < M; r0 += MAX_M)
            gemm_block(blk, x + r0 * H, M - r0 < MAX_M ? M - r0 : MAX_M, H, e->gates, G, dt, NULL, F32,
                       b.logits + r0 * G, dt);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) route_row(b.logits + m * G, e->E, k, e->renorm, b.sel_e + m * k, b.sel_w + m * k, dt);
#pragma omp single
    group_rows(e, &b, M);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; r++) memcpy(b.xg + r * H, x + b.gtok[r] * H, sizeof(float) * (size_t)H);
    const int64_t items = b.first[e->E + 1]; /* grouped_block reads the shared first / active tables */
#pragma omp for schedule(static)
    for (int64_t u = 0; u < items; u++) grouped_block(e, &b, x, H, M, u, 0, dt);
    const int64_t chunks = (I + 63) / 64, s_chunks = (S + 63) / 64;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < R * chunks + M * s_chunks; c++) { /* 64 outputs of one row a work item */
        const int shared = c >= R * chunks;
        const int64_t W = shared ? S : I, per = shared ? s_chunks : chunks, cc = shared ? c - R * chunks : c;
        const int64_t row = cc / per, i0 = cc % per * 64, n = W - i0 < 64 ? W - i0 : 64;
        const float* fg = shared ? b.fg + R * 2 * I : b.fg;
        float* a = shared ? b.act + R * I : b.act;
        silu_mul_row(fg, F32, row * 2 * W + i0, row * 2 * W + W + i0, a, F32, row * W + i0, n, dt);
    }
#pragma omp single
    regroup(e, &b, H);
    const int64_t items2 = b.first[e->E + 1];
#pragma omp for schedule(static)
    for (int64_t u = 0; u < items2; u++) grouped_block(e, &b, x, H, M, u, 1, dt);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) combine_row(e, &b, M, H, m, out, odt, dt);
}

#endif
