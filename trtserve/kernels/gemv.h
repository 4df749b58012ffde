/* The dense decode GEMM's inner loops, shared by dense_gemv.c (one GEMM a call) and
 * decode_layers.c (every layer of a decode step in one call): x [M][K] float32, w [N][K] in float32,
 * bf16, fp16 or int8, y [M][N] in ydt; work is split in blocks of ROWS outputs. */
#ifndef TRTSERVE_GEMV_H
#define TRTSERVE_GEMV_H
#include "dtypes.h"

#define ROWS 4   /* weight rows (outputs) per block: four concurrent read streams per thread */
#define MAX_M 64 /* the caller routes larger batches to torch */
#define KC 1024  /* k per chunk: 4 rows of float32 weights (16 KB) stay in L1 while every row of x uses them */
#define KSTEP 16 /* k per step of a tile: one 64-byte line of float32 weights, one prefetch */
#ifdef __AVX512F__
#define PFW 1024 /* bytes ahead in each weight row that the first tile prefetches */
#else
#define PFW 2048 /* AMD EPYC (Zen 3) read its weights 1.2-1.4x as fast at batch 1 with 2 KB than with 1 KB */
#endif
/* Up to this many rows of x the first tile prefetches the next block's rows too: it helps few-row
 * decode and costs a little at many rows. */
#define PF_NEXT_M 8

/* Tiles of MR rows of x by ROWS weight rows, on dtypes.h's vectors. Each (row of x, weight row) sums in one order
 * whatever M: lane l over k = LANES i + l per chunk, the horizontal sum added to the chunks before, the K mod
 * KSTEP products one by one; so a row of a verification step gives the bits a plain decode row gives. */
#ifdef __AVX512F__
#define MR 6 /* rows of x a tile: 24 sums, 10 loads for 24 FMAs (4 rows, or 3 or 2 by 8 weight rows, ran slower) */
#else
#define MR 3 /* 12 sums, 7 loads for 12 FMAs (4 rows spill registers and ran slower) */
#endif

/* A tile step's prefetches at k (elements, es bytes each) of each weight row; pf as tile_pf's. */
static inline __attribute__((always_inline)) void tile_prefetch(const void* const* w, int64_t es, int64_t k,
                                                               const int pf, int j0, int js, int64_t nx) {
    if (pf & 1) /* weights from DRAM: keeps each row's stream ahead of the FMAs */
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) _mm_prefetch((const char*)w[j] + k * es + PFW, _MM_HINT_T0);
    if (pf & 2) /* the next block's rows into L2 (their first PFW bytes are nobody's PFW ahead) */
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) _mm_prefetch((const char*)w[j] + (nx + k) * es, _MM_HINT_T1);
    if (pf & 4)
        for (int j = j0; j < ROWS; j += js) _mm_prefetch((const char*)w[j] + (nx + k) * es, _MM_HINT_T1);
}

/* o[i][j] += the lanes' sum of a[i][j], for mr rows of x by ROWS weight rows. */
static inline __attribute__((always_inline)) void tile_sums(vec a[MR][ROWS], int mr, float* o) {
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j += 4) {
            float* oo = o + i * ROWS + j;
            _mm_storeu_ps(oo, _mm_add_ps(_mm_loadu_ps(oo), vhsum4(a[i][j], a[i][j + 1], a[i][j + 2], a[i][j + 3])));
        }
}

/* mr rows of x (a constant after inlining) by ROWS weight rows: acc[m][j] += x[m] . w[j] over [k0, k0 + kv).
 * pf (a constant in each copy of the loop): 1 prefetch each weight row PFW bytes ahead, 2 also the next block's
 * rows, 4 the next block's rows j0, j0 + js, ... (the later tiles of a many-row block share them out, so the
 * next block streams in from DRAM while this one computes from L1); the next block's row j is nx elements past
 * w[j]. */
static inline __attribute__((always_inline)) void tile_pf(const void* const* w, int dt, const float* x, int64_t K,
                                                         int mr, int64_t k0, int64_t kv, float* o, const int pf,
                                                         int j0, int js, int64_t nx) {
    const int64_t es = dt == F32 ? 4 : dt == I8 ? 1 : 2;
    vec a[MR][ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) a[i][j] = vzero();
    for (int64_t k = 0; k < kv; k += KSTEP) {
        tile_prefetch(w, es, k0 + k, pf, j0, js, nx);
#pragma GCC unroll 2
        for (int h = 0; h < KSTEP; h += LANES) {
            vec u[MR];
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) u[i] = vload(x + i * K + k0 + k + h);
#pragma GCC unroll 8
            for (int j = 0; j < ROWS; j++) {
                const vec v = vloadw(w[j], dt, k0 + k + h);
#pragma GCC unroll 8
                for (int i = 0; i < mr; i++) a[i][j] = vfma(v, u[i], a[i][j]);
            }
        }
    }
    tile_sums(a, mr, o);
}

#ifdef __AVX512BF16__ /* built so where the CPU has AVX512-BF16 (native.py) */
#define DP_BF16 1
/* tile_pf for bf16 weights and x whose float32 values are bf16 (a bf16 model's): vdpbf16ps adds two products
 * a lane an instruction, 32 k a step; each (row of x, weight row) still sums in one order whatever M. A last
 * KSTEP of k (kv not a multiple of 2 KSTEP) runs as tile_pf's. xb: x as bf16 (the same [M][K] layout), packed
 * once for the whole GEMM, or NULL: x converted here, once per block of weight rows (1.2-1.3x slower at 8-64
 * rows, docs/performance.md). */
static inline __attribute__((always_inline)) void tile_dp(const void* const* w, const float* x, const uint16_t* xb,
                                                         int64_t K, int mr, int64_t k0, int64_t kv, float* o,
                                                         const int pf, int j0, int js, int64_t nx) {
    __m512 a[MR][ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) a[i][j] = _mm512_setzero_ps();
    const int64_t kd = kv & ~(int64_t)(2 * KSTEP - 1);
    for (int64_t k = 0; k < kd; k += 2 * KSTEP) {
        tile_prefetch(w, 2, k0 + k, pf, j0, js, nx);
        __m512bh u[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const float* xi = x + i * K + k0 + k;
            u[i] = xb ? (__m512bh)_mm512_loadu_si512(xb + i * K + k0 + k) /* packed once a GEMM: the same values */
                      : _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xi + KSTEP), _mm512_loadu_ps(xi)); /* exact: bf16 values */
        }
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) {
            const __m512bh v = (__m512bh)_mm512_loadu_si512((const uint16_t*)w[j] + k0 + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) a[i][j] = _mm512_dpbf16_ps(a[i][j], v, u[i]);
        }
    }
    if (kd < kv) { /* the last KSTEP */
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) {
            const __m512 v = load16(w[j], BF16, k0 + kd);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) a[i][j] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + i * K + k0 + kd), a[i][j]);
        }
    }
    tile_sums(a, mr, o);
}
#else
#define DP_BF16 0
#endif
#define BF16_DOT 4 /* the tiles' dtype code for bf16 weights times bf16 x on tile_dp (gemm_block picks it) */

/* tile_pf with pf and the weight dtype as constants: a run-time one branches in the inner loop. */
static inline __attribute__((always_inline)) void tile(const void* const* w, int dt, const float* x,
                                                      const uint16_t* xb, int64_t K, int mr, int64_t k0, int64_t kv,
                                                      float* o, int pf, int j0, int js, int64_t nx) {
#define PF1(d) tile_pf(w, d, x, K, mr, k0, kv, o, 1, 0, 1, nx)
#define PF3(d) tile_pf(w, d, x, K, mr, k0, kv, o, 3, 0, 1, nx)
#define PF4(d) tile_pf(w, d, x, K, mr, k0, kv, o, 4, j0, js, nx)
#define PF0(d) tile_pf(w, d, x, K, mr, k0, kv, o, 0, 0, 1, nx)
#if DP_BF16
    if (dt == BF16_DOT) {
        if (pf == 1) tile_dp(w, x, xb, K, mr, k0, kv, o, 1, 0, 1, nx);
        else if (pf == 3) tile_dp(w, x, xb, K, mr, k0, kv, o, 3, 0, 1, nx);
        else if (pf == 4) tile_dp(w, x, xb, K, mr, k0, kv, o, 4, j0, js, nx);
        else tile_dp(w, x, xb, K, mr, k0, kv, o, 0, 0, 1, nx);
        return;
    }
#endif
    if (pf == 1) { BY_WDTYPE(dt, PF1) }
    else if (pf == 3) { BY_WDTYPE(dt, PF3) }
    else if (pf == 4) { BY_WDTYPE(dt, PF4) }
    else { BY_WDTYPE(dt, PF0) }
#undef PF1
#undef PF3
#undef PF4
#undef PF0
}

/* acc[m][j] += sum over k in [k0, k0 + kc) of x[m][k] w[j][k] for the ROWS weight rows w[j].
 * next: elements from each row to the next block's, 0 where none follows (its rows are prefetched, by the first
 * tile up to PF_NEXT_M rows of x, else by the others, a share of its rows each). */
static inline __attribute__((always_inline)) void chunk(const void* const* w, int dt, const float* xf,
                                                       const uint16_t* xb, int64_t M, int64_t K, int64_t k0,
                                                       int64_t kc, float* acc, int64_t next) {
    const int64_t kv = kc & ~(int64_t)(KSTEP - 1);
    const int64_t tiles = (M + MR - 1) / MR, later = tiles - 1; /* the last M mod MR rows are one tile */
    int64_t m = 0, t = 0;
    const int pf = 1 | (M <= PF_NEXT_M && next ? 2 : 0), spread = M > PF_NEXT_M && next && later > 0;
#define PF_OF(t) ((t) ? (spread && (t) <= ROWS ? 4 : 0) : pf)
#define JS (int)(later < ROWS ? later : ROWS)
    for (; m + MR <= M; m += MR, t++)
        tile(w, dt, xf + m * K, xb ? xb + m * K : NULL, K, MR, k0, kv, acc + m * ROWS, PF_OF(t), (int)t - 1, JS, next);
    if (m < M) {
#define REST(r) tile(w, dt, xf + m * K, xb ? xb + m * K : NULL, K, r, k0, kv, acc + m * ROWS, PF_OF(t), (int)t - 1, JS, next)
        switch (M - m) { /* a constant tile height for each */
#if MR > 3
        case 5: REST(5); break;
        case 4: REST(4); break;
        case 3: REST(3); break;
#endif
        case 2: REST(2); break;
        default: REST(1);
        }
#undef REST
    }
#undef PF_OF
#undef JS
    for (int64_t k = kv; k < kc; k++) /* K not a multiple of KSTEP */
        for (int j = 0; j < ROWS; j++) {
            const float v = load1(w[j], dt == BF16_DOT ? BF16 : dt, k0 + k);
            for (int64_t mm = 0; mm < M; mm++) acc[mm * ROWS + j] += xf[mm * K + k0 + k] * v;
        }
}

static inline int64_t gemm_blocks(int64_t N) { return (N + ROWS - 1) / ROWS; }

/* Whether gemm_block's tiles for weights in wdt, results rounded to rdt, read x as bf16 (tile_dp): pack_bf16 it. */
static inline int dot_x(int wdt, int rdt) { return DP_BF16 && wdt == BF16 && rdt == BF16; }

/* xb[i] = x[i] for i in [i0, i1), x's float32 values bf16 values (a bf16 model's): exact. */
static inline void pack_bf16(const float* x, int64_t i0, int64_t i1, uint16_t* xb) {
    int64_t i = i0;
#if DP_BF16
    for (; i + 16 <= i1; i += 16) _mm256_storeu_si256((__m256i*)(xb + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
#endif
    for (; i < i1; i++) store1(xb, BF16, i, x[i]);
}

/* Up to this many rows of x, block b takes outputs b, b + q, b + 2 q and b + 3 q (q = gemm_blocks(N)): a
 * block's next block continues each of its rows' read streams, so a thread's run of blocks reads four long
 * streams, as a STREAM read does (four adjacent rows side by side make four short streams; docs/performance.md
 * has the figures). From 24 rows, where the GEMM is compute-bound, far-apart rows lost to adjacent ones. */
#define STREAMS_M 16

/* Outputs of block b (above; else b * ROWS to b * ROWS + ROWS), those below N, of
 * y = (x w^T) * scale for all M rows (one work item), stored in ydt after rounding to rdt. xb: NULL, or xf as
 * bf16 (pack_bf16) where a bf16 model's bf16 weights run on tile_dp. */
static inline __attribute__((always_inline)) void gemm_block(int64_t b, const float* xf, const uint16_t* xb, int64_t M, int64_t K,
                                                            const void* w, int64_t N, int wdt, const float* scale,
                                                            int ydt, void* y, int rdt) {
    const size_t es = wdt == F32 ? 4 : wdt == I8 ? 1 : 2;
    const int64_t q = gemm_blocks(N), step = M <= STREAMS_M ? 1 : ROWS; /* to this row in the next block */
    int64_t n[ROWS];
    int rows = 0;
    for (int j = 0; j < ROWS; j++) {
        const int64_t at = step == 1 ? b + j * q : b * ROWS + j;
        n[j] = at < N || !j ? at : n[j - 1]; /* past N: repeat the last row, its sums are dropped */
        rows += at < N;
    }
    const void* r[ROWS];
    for (int j = 0; j < ROWS; j++) r[j] = (const char*)w + (size_t)(n[j] * K) * es;
    const int64_t next = b + 1 < q ? step * K : 0; /* to the next block's rows (a prefetch past N never faults) */
    float acc[MAX_M * ROWS];
    memset(acc, 0, sizeof(float) * (size_t)(M * ROWS));
    const int64_t parts = (K + KC - 1) / KC, kc = ((K + parts - 1) / parts + KSTEP - 1) & ~(int64_t)(KSTEP - 1);
    const int tdt = DP_BF16 && wdt == BF16 && rdt == BF16 ? BF16_DOT : wdt; /* x of a bf16 model: bf16 values */
    for (int64_t k0 = 0; k0 < K; k0 += kc)
        chunk(r, tdt, xf, tdt == BF16_DOT ? xb : NULL, M, K, k0, K - k0 < kc ? K - k0 : kc, acc, next);
    for (int64_t m = 0; m < M; m++)
        for (int j = 0; j < rows; j++)
            store1(y, ydt, m * N + n[j], rnd(scale ? acc[m * ROWS + j] * scale[n[j]] : acc[m * ROWS + j], rdt));
}

#endif
