/* The dense decode GEMM's inner loops, shared by dense_gemv.c (one GEMM a call) and
 * decode_layers.c (every layer of a decode step in one call): x [M][K] float32, w [N][K] in float32,
 * bf16, fp16 or int8, y [M][N] in ydt; work is split in blocks of ROWS outputs. */
#ifndef TRTSERVE_GEMV_H
#define TRTSERVE_GEMV_H
#include "dtypes.h"

#define ROWS 4   /* weight rows (outputs) per block: four concurrent read streams per thread */
#define KC 512   /* k per chunk: ROWS x KC weights stay in L1 while every row of x uses them */
#define MAX_M 64 /* the caller routes larger batches to torch */
#ifdef __AVX512F__
#define SEQ_M 0 /* AVX-512 CPUs: four weight rows side by side stream faster than one at a time (chunk16) */
#else
#define SEQ_M 4 /* up to this many rows of x, a block's weight rows are read one after another (row_dots) */
#endif

/* The AVX2 build's sums for one (row of x, weight row), whatever M: row_dots' order. Lane l of
 * part[8 s .. 8 s + 8) sums x[k] w[k] over k = 32 i + 8 s + l in order of k (then, for s = 0, the steps
 * of 8 past the last whole 32); the total is hsum((p0 + p1) + (p2 + p3)), then the K mod 8 products
 * one by one (part_total). So a row of a verification step gives the bits a plain decode row gives. */
#define PART 32

/* part[m][r] += the products of [k0, k0 + kc) (k0 a multiple of 32; first: part starts from zero) for
 * ROWS weight rows w0..w3, as row_dots sums them (above). Four passes over the chunk, one per 8-lane
 * slice of each 32 for each pair of x rows, keep 2 x 4 sums in registers; weights and x rows stay in L1. */
static inline __attribute__((always_inline)) void chunk(const void* w0, const void* w1, const void* w2,
                                                       const void* w3, int dt, const float* xf, int64_t M,
                                                       int64_t K, int64_t k0, int64_t kc, float* part, int first,
                                                       int64_t next) {
    const int64_t k32 = kc & ~(int64_t)31, k8 = kc & ~(int64_t)7;
    const int64_t es = dt == F32 ? 4 : dt == I8 ? 1 : 2;
    const void* const wr[ROWS] = {w0, w1, w2, w3};
    int64_t m = 0;
    for (; m + 1 < M; m += 2) /* two rows of x share each weight load: 8 independent sums */
        for (int s = 0; s < 4; s++) {
            if (next && m == 2) { /* the next block's row s into L2 while this block computes from L1 */
                const char* nx = (const char*)wr[s] + (next + k0) * es;
                for (int64_t b = 0; b < kc * es; b += 64) _mm_prefetch(nx + b, _MM_HINT_T1);
            }
            const float* xa = xf + m * K + k0;
            const float* xb = xa + K;
            float* pa = part + m * ROWS * PART + 8 * s;
            float* pb = pa + ROWS * PART;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            if (!first) {
                a0 = _mm256_loadu_ps(pa); a1 = _mm256_loadu_ps(pa + PART);
                a2 = _mm256_loadu_ps(pa + 2 * PART); a3 = _mm256_loadu_ps(pa + 3 * PART);
                b0 = _mm256_loadu_ps(pb); b1 = _mm256_loadu_ps(pb + PART);
                b2 = _mm256_loadu_ps(pb + 2 * PART); b3 = _mm256_loadu_ps(pb + 3 * PART);
            }
#define CHUNK_PAIR(k)                                                                                           \
    do {                                                                                                        \
        __m256 u = _mm256_loadu_ps(xa + (k)), v = _mm256_loadu_ps(xb + (k)), w;                                 \
        w = load8(w0, dt, k0 + (k)); a0 = _mm256_fmadd_ps(w, u, a0); b0 = _mm256_fmadd_ps(w, v, b0);          \
        w = load8(w1, dt, k0 + (k)); a1 = _mm256_fmadd_ps(w, u, a1); b1 = _mm256_fmadd_ps(w, v, b1);          \
        w = load8(w2, dt, k0 + (k)); a2 = _mm256_fmadd_ps(w, u, a2); b2 = _mm256_fmadd_ps(w, v, b2);          \
        w = load8(w3, dt, k0 + (k)); a3 = _mm256_fmadd_ps(w, u, a3); b3 = _mm256_fmadd_ps(w, v, b3);          \
    } while (0)
            for (int64_t k = 8 * s; k < k32; k += 32) CHUNK_PAIR(k);
            if (!s)
                for (int64_t k = k32; k < k8; k += 8) CHUNK_PAIR(k);
#undef CHUNK_PAIR
            _mm256_storeu_ps(pa, a0); _mm256_storeu_ps(pa + PART, a1);
            _mm256_storeu_ps(pa + 2 * PART, a2); _mm256_storeu_ps(pa + 3 * PART, a3);
            _mm256_storeu_ps(pb, b0); _mm256_storeu_ps(pb + PART, b1);
            _mm256_storeu_ps(pb + 2 * PART, b2); _mm256_storeu_ps(pb + 3 * PART, b3);
        }
    for (; m < M; m++)
        for (int s = 0; s < 4; s++) {
            const float* xa = xf + m * K + k0;
            float* pa = part + m * ROWS * PART + 8 * s;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            if (!first) {
                a0 = _mm256_loadu_ps(pa); a1 = _mm256_loadu_ps(pa + PART);
                a2 = _mm256_loadu_ps(pa + 2 * PART); a3 = _mm256_loadu_ps(pa + 3 * PART);
            }
#define CHUNK_ONE(k)                                                                                            \
    do {                                                                                                        \
        __m256 u = _mm256_loadu_ps(xa + (k));                                                                   \
        a0 = _mm256_fmadd_ps(load8(w0, dt, k0 + (k)), u, a0);                                                   \
        a1 = _mm256_fmadd_ps(load8(w1, dt, k0 + (k)), u, a1);                                                   \
        a2 = _mm256_fmadd_ps(load8(w2, dt, k0 + (k)), u, a2);                                                   \
        a3 = _mm256_fmadd_ps(load8(w3, dt, k0 + (k)), u, a3);                                                   \
    } while (0)
            for (int64_t k = 8 * s; k < k32; k += 32) CHUNK_ONE(k);
            if (!s)
                for (int64_t k = k32; k < k8; k += 8) CHUNK_ONE(k);
#undef CHUNK_ONE
            _mm256_storeu_ps(pa, a0); _mm256_storeu_ps(pa + PART, a1);
            _mm256_storeu_ps(pa + 2 * PART, a2); _mm256_storeu_ps(pa + 3 * PART, a3);
        }
}

/* The total of one (row of x, weight row) from its part (chunk), as row_dots ends: the four slices
 * added pairwise, the horizontal sum, then the K mod 8 products in order. */
static inline __attribute__((always_inline)) float part_total(const float* p, const void* wr, int dt,
                                                             const float* xa, int64_t K) {
    const __m256 s01 = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
    float sum = hsum(_mm256_add_ps(s01, _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24))));
    for (int64_t k = K & ~(int64_t)7; k < K; k++) sum += xa[k] * load1(wr, dt, k);
    return sum;
}

#ifdef __AVX512F__ /* built so where the CPU has AVX-512 F/DQ/BW/VL (native.py) */
#define KC16 1024 /* the AVX-512 chunk's k: 4 rows of float32 weights (16 KB) stay in L1 */
#define MR16 6    /* rows of x a tile: 24 sums, 10 loads for 24 FMAs (4 rows, or 3 or 2 by 8 weight rows, ran slower) */
#define PFW 1024  /* bytes ahead in each weight row that the first tile prefetches */
/* Up to this many rows of x the first tile prefetches the next block's rows too: it helps few-row
 * decode and costs a little at many rows. */
#define PF_NEXT_M 8

/* mr rows of x (a constant after inlining) by ROWS weight rows, 16 lanes: acc[m][j] += x[m] . w[j] over [k0, k0 + kv).
 * pf (a constant in each copy of the loop): 1 prefetch each weight row PFW bytes ahead, 2 also the next block's
 * rows, 4 the next block's rows j0, j0 + js, ... (the later tiles of a many-row block share them out, so the
 * next block streams in from DRAM while this one computes from L1); the next block's row j is nx elements past
 * w[j]. */
static inline __attribute__((always_inline)) void tile16_pf(const void* const* w, int dt, const float* x, int64_t K,
                                                           int mr, int64_t k0, int64_t kv, float* o, const int pf,
                                                           int j0, int js, int64_t nx) {
    const int64_t es = dt == F32 ? 4 : dt == I8 ? 1 : 2;
    __m512 a[MR16][ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) a[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kv; k += 16) {
        __m512 u[MR16];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) u[i] = _mm512_loadu_ps(x + i * K + k0 + k);
        if (pf & 1) /* weights from DRAM: keeps each row's stream ahead of the FMAs */
#pragma GCC unroll 8
            for (int j = 0; j < ROWS; j++) _mm_prefetch((const char*)w[j] + (k0 + k) * es + PFW, _MM_HINT_T0);
        if (pf & 2) /* the next block's rows into L2 (their first PFW bytes are nobody's PFW ahead) */
#pragma GCC unroll 8
            for (int j = 0; j < ROWS; j++) _mm_prefetch((const char*)w[j] + (nx + k0 + k) * es, _MM_HINT_T1);
        if (pf & 4)
            for (int j = j0; j < ROWS; j += js) _mm_prefetch((const char*)w[j] + (nx + k0 + k) * es, _MM_HINT_T1);
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j++) {
            const __m512 v = load16(w[j], dt, k0 + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) a[i][j] = _mm512_fmadd_ps(v, u[i], a[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < ROWS; j += 4) {
            float* oo = o + i * ROWS + j;
            _mm_storeu_ps(oo, _mm_add_ps(_mm_loadu_ps(oo), hsum4x16(a[i][j], a[i][j + 1], a[i][j + 2], a[i][j + 3])));
        }
}

static inline __attribute__((always_inline)) void tile16(const void* const* w, int dt, const float* x, int64_t K,
                                                        int mr, int64_t k0, int64_t kv, float* o, int pf, int j0,
                                                        int js, int64_t nx) {
    if (pf == 1) tile16_pf(w, dt, x, K, mr, k0, kv, o, 1, 0, 1, nx);
    else if (pf == 3) tile16_pf(w, dt, x, K, mr, k0, kv, o, 3, 0, 1, nx);
    else if (pf == 4) tile16_pf(w, dt, x, K, mr, k0, kv, o, 4, j0, js, nx);
    else tile16_pf(w, dt, x, K, mr, k0, kv, o, 0, 0, 1, nx);
}

/* acc[m][j] += sum over k in [k0, k0 + kc) of x[m][k] w[j][k] for the ROWS weight rows w[j], on 16 lanes.
 * next: elements from each row to the next block's, 0 where none follows (its rows are prefetched, by the first
 * tile up to PF_NEXT_M rows of x, else by the others, a share of its rows each). */
static inline __attribute__((always_inline)) void chunk16(const void* const* w, int dt, const float* xf, int64_t M,
                                                         int64_t K, int64_t k0, int64_t kc, float* acc, int64_t next) {
    const int64_t kv = kc & ~(int64_t)15;
    const int64_t tiles = (M + MR16 - 1) / MR16, later = tiles - 1; /* the last M mod MR16 rows are one tile */
    int64_t m = 0, t = 0;
    const int pf = 1 | (M <= PF_NEXT_M && next ? 2 : 0), spread = M > PF_NEXT_M && next && later > 0;
#define PF_OF(t) ((t) ? (spread && (t) <= ROWS ? 4 : 0) : pf)
#define JS (int)(later < ROWS ? later : ROWS)
    for (; m + MR16 <= M; m += MR16, t++) tile16(w, dt, xf + m * K, K, MR16, k0, kv, acc + m * ROWS, PF_OF(t), (int)t - 1, JS, next);
    if (m < M) {
#define REST(r) tile16(w, dt, xf + m * K, K, r, k0, kv, acc + m * ROWS, PF_OF(t), (int)t - 1, JS, next)
        switch (M - m) { /* a constant tile height for each */
        case 5: REST(5); break;
        case 4: REST(4); break;
        case 3: REST(3); break;
        case 2: REST(2); break;
        default: REST(1);
        }
#undef REST
    }
#undef PF_OF
#undef JS
    for (int64_t k = kv; k < kc; k++) /* K not a multiple of 16 */
        for (int j = 0; j < ROWS; j++) {
            const float v = load1(w[j], dt, k0 + k);
            for (int64_t mm = 0; mm < M; mm++) acc[mm * ROWS + j] += xf[mm * K + k0 + k] * v;
        }
}
#endif

/* out[m * stride] = sum over k of x[m][k] wr[k] for m < M (M <= SEQ_M): one weight row, front to back, dotted
 * with each pair of x rows in turn (the row stays in L1 after the first pair). A thread's blocks are then
 * adjacent rows, which it reads as one sequential stream. Chosen on an AVX2 EPYC when chunk's four adjacent
 * rows side by side made four short streams and halved the bandwidth of batch-1 GEMVs over narrow rows (its
 * blocks now read four long streams: gemm_block). Sums: four 8-lane accumulators over k mod 32, added
 * pairwise, then hsum; K mod 8 is added after. */
static inline __attribute__((always_inline)) void row_dots(const void* wr, int dt, const float* xf, int64_t M,
                                                          int64_t K, float* out, int64_t stride) {
    const int64_t k32 = K & ~(int64_t)31, k8 = K & ~(int64_t)7;
    int64_t m = 0;
    for (; m < M; m += 2) {
        const int two = m + 1 < M; /* the last row of an odd M runs alone */
        const float* xa = xf + m * K;
        const float* xb = two ? xa + K : xa;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        int64_t k = 0;
        for (; k < k32; k += 32) {
            __m256 w0 = load8(wr, dt, k), w1 = load8(wr, dt, k + 8), w2 = load8(wr, dt, k + 16), w3 = load8(wr, dt, k + 24);
            a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xa + k), a0);
            a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xa + k + 8), a1);
            a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xa + k + 16), a2);
            a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xa + k + 24), a3);
            if (two) {
                b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb + k), b0);
                b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + k + 8), b1);
                b2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + k + 16), b2);
                b3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + k + 24), b3);
            }
        }
        for (; k < k8; k += 8) {
            __m256 w0 = load8(wr, dt, k);
            a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xa + k), a0);
            if (two) b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb + k), b0);
        }
        float sa = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        float sb = hsum(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));
        for (; k < K; k++) {
            const float v = load1(wr, dt, k);
            sa += xa[k] * v;
            sb += xb[k] * v;
        }
        out[m * stride] = sa;
        if (two) out[(m + 1) * stride] = sb;
    }
}

static inline int64_t gemm_blocks(int64_t N) { return (N + ROWS - 1) / ROWS; }

/* Past SEQ_M and up to this many rows of x, block b takes outputs b, b + q, b + 2 q and b + 3 q (q =
 * gemm_blocks(N)): a block's next block continues each of its rows' read streams, so a thread's run of blocks
 * reads four long streams, as a STREAM read does (four adjacent rows side by side make four short streams;
 * docs/performance.md has the figures). From 24 rows, where the GEMM is compute-bound, far-apart rows lost to
 * adjacent ones; row_dots reads adjacent rows as one stream, and far-apart ones lost there too (AVX2 build). */
#define STREAMS_M 16

/* Outputs of block b (above; else b * ROWS to b * ROWS + ROWS), those below N, of
 * y = (x w^T) * scale for all M rows (one work item), stored in ydt after rounding to rdt. */
static inline __attribute__((always_inline)) void gemm_block(int64_t b, const float* xf, int64_t M, int64_t K,
                                                            const void* w, int64_t N, int wdt, const float* scale,
                                                            int ydt, void* y, int rdt) {
    const size_t es = wdt == F32 ? 4 : wdt == I8 ? 1 : 2;
    const int64_t q = gemm_blocks(N), step = M > SEQ_M && M <= STREAMS_M ? 1 : ROWS; /* to this row in the next block */
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
    if (M <= SEQ_M) {
        for (int j = 0; j < rows; j++) row_dots(r[j], wdt, xf, M, K, acc + j, ROWS);
    } else {
        memset(acc, 0, sizeof(float) * (size_t)(M * ROWS));
#ifdef __AVX512F__ /* K in equal chunks of a multiple of 16: each chunk ends in a horizontal sum */
        const int64_t parts = (K + KC16 - 1) / KC16, kc = ((K + parts - 1) / parts + 15) & ~(int64_t)15;
        for (int64_t k0 = 0; k0 < K; k0 += kc)
            chunk16(r, wdt, xf, M, K, k0, K - k0 < kc ? K - k0 : kc, acc, next);
#else /* the sums of row_dots, K in equal chunks of a multiple of 32, at most KC */
        float part[MAX_M * ROWS * PART];
        const int64_t parts = (K + KC - 1) / KC, kc = ((K + parts - 1) / parts + 31) & ~(int64_t)31;
        for (int64_t k0 = 0; k0 < K; k0 += kc)
            chunk(r[0], r[1], r[2], r[3], wdt, xf, M, K, k0, K - k0 < kc ? K - k0 : kc, part, k0 == 0, next);
        for (int64_t m = 0; m < M; m++)
            for (int j = 0; j < ROWS; j++)
                acc[m * ROWS + j] = part_total(part + (m * ROWS + j) * PART, r[j], wdt, xf + m * K, K);
#endif
    }
    for (int64_t m = 0; m < M; m++)
        for (int j = 0; j < rows; j++)
            store1(y, ydt, m * N + n[j], rnd(scale ? acc[m * ROWS + j] * scale[n[j]] : acc[m * ROWS + j], rdt));
}

#endif
