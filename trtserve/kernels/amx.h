/* The bf16 decode GEMM on AMX (Intel Xeon from Sapphire Rapids), shared by dense_gemv.c and decode_layers.c:
 * y = x w^T for AMX_MIN_M to MAX_M rows of x, x and w in bf16, w stored (N, K) as torch holds it.
 *
 * Why: gemv.h's AVX-512 tiles run bf16 weights at float32's FMA rate (170-190 GFLOP/s at 8-64 rows, widened
 * or by vdpbf16ps alike), so from 5 rows torch's AMX GEMM won and a bf16 decode step of more than 4 rows left
 * the one-call step for op-by-op torch. A tile multiply does 16 x 16 x 32 products in the time of a few FMAs.
 *
 * A unit is 16 weight rows: each step of 32 inputs loads them as an A tile in place (stride K), multiplies it
 * with one B tile per 16 rows of x (amx_pack_row's layout: 32 inputs of 16 rows, in pairs) and accumulates one
 * float32 C tile per 16 rows of x. An output's sum runs over k in steps of 32 whatever M, so a row gets the same
 * bits in every batch of AMX_MIN_M rows or more. Where K is not a multiple of 32, or N of 16, the last step or
 * unit reads a zero-padded copy.
 */
#ifndef TRTSERVE_AMX_H
#define TRTSERVE_AMX_H
#include "dtypes.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) /* built so where the CPU has them (native.py) */
#define AMX 1
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_N 16 /* weight rows a unit, rows of x a C tile */
#define AMX_K 32 /* inputs a tile step */
/* Fewer rows of x than this run on gemv.h's tiles, which stream few-row GEMMs faster (docs/performance.md). */
#define AMX_MIN_M 8
#define AMX_PF 4 /* steps ahead that each weight row is prefetched: a tile load waits for all 16 of its lines */

/* Whether Linux lets this process use the tile registers: the first call asks for them (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA; asking again is harmless), later calls read the answer. */
static inline int amx_permitted(void) {
    static int state; /* 0: not asked yet, 1: granted, -1: refused */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (!s) {
        s = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s > 0;
}

static inline int64_t amx_kpad(int64_t K) { return (K + AMX_K - 1) & ~(int64_t)(AMX_K - 1); }
static inline int64_t amx_units(int64_t N) { return (N + AMX_N - 1) / AMX_N; }
static inline int64_t amx_mtiles(int64_t M) { return (M + AMX_N - 1) / AMX_N; }
/* Elements of amx_pack_row's buffer for M rows of K inputs. */
static inline int64_t amx_pack_size(int64_t M, int64_t K) { return amx_mtiles(M) * AMX_N * amx_kpad(K); }

/* Row m (< the padded rows, amx_mtiles(M) * 16) of x [M][K] (xdt values, bf16-exact) into xv, zeros past M and K:
 * xv [m / 16][k / 32][(k % 32) / 2][m % 16][k % 2], so the B tile of rows 16 t.. and inputs 32 kb.. is the 1 KB
 * at (t * kpad / 32 + kb) * 512. */
static inline void amx_pack_row(const void* x, int xdt, int64_t M, int64_t K, int64_t m, uint16_t* xv) {
    const int64_t kp = amx_kpad(K);
    uint16_t* t = xv + (m / AMX_N) * AMX_N * kp + (m % AMX_N) * 2;
    for (int64_t k = 0; k < kp; k++) {
        uint16_t v = 0;
        if (m < M && k < K) store1(&v, BF16, 0, load1(x, xdt, m * K + k));
        t[(k / AMX_K) * AMX_N * AMX_K + (k % AMX_K) / 2 * 2 * AMX_N + (k & 1)] = v;
    }
}

typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config_t;

/* This thread's tiles, all 16 rows of 64 bytes: C 0-3, A and B 4-7 (amx_item). Tile state is per thread: every
 * thread of a GEMM's parallel region loads it before its work items and releases it after (oneDNN loads its own). */
static inline void amx_begin(void) {
    amx_config_t c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = AMX_N;
    }
    _tile_loadconfig(&c);
}

static inline void amx_end(void) { _tile_release(); }

/* Units a work item takes for M rows of x: every C tile busy (1 to 4 rows of C tiles), so that a few rows of x
 * still keep several tile multiplies in flight. An output's sum is the same in any grouping. */
static inline int64_t amx_group(int64_t M) { return amx_mtiles(M) == 1 ? 3 : amx_mtiles(M) == 2 ? 2 : 1; }
static inline int64_t amx_items(int64_t M, int64_t N) { return (amx_units(N) + amx_group(M) - 1) / amx_group(M); }

/* The A tile of unit u at step kb: the weights in place (stride K), or a zero-padded copy in pad where the unit
 * has fewer than 16 rows or the step fewer than 32 inputs. */
static inline const uint16_t* amx_a(const uint16_t* w, int64_t K, int64_t N, int64_t u, int64_t kb, uint16_t* pad,
                                    int64_t* stride) {
    const int64_t n0 = u * AMX_N, rows = N - n0 < AMX_N ? N - n0 : AMX_N, k0 = kb * AMX_K;
    if (rows == AMX_N && k0 + AMX_K <= K) {
        *stride = K * 2;
        return w + n0 * K + k0;
    }
    const int64_t kn = K - k0 < AMX_K ? K - k0 : AMX_K;
    memset(pad, 0, sizeof(uint16_t) * AMX_N * AMX_K);
    for (int64_t r = 0; r < rows; r++) memcpy(pad + r * AMX_K, w + (n0 + r) * K + k0, (size_t)kn * 2);
    *stride = AMX_K * 2;
    return pad;
}

/* C tile c (an immediate in each branch) into buf. */
static inline void amx_store(int c, float* buf) {
    if (c == 0) _tile_stored(0, buf, 64);
    else if (c == 1) _tile_stored(1, buf, 64);
    else if (c == 2) _tile_stored(2, buf, 64);
    else _tile_stored(3, buf, 64);
}

/* Work item i (amx_items): the outputs of its units (16 a unit, those below N) of y = x w^T for the M rows packed
 * in xv, stored in ydt after rounding to rdt (y [M][N]). Between amx_begin and amx_end. */
static inline __attribute__((always_inline)) void amx_item(int64_t i, const uint16_t* xv, int64_t M, int64_t K,
                                                          const uint16_t* w, int64_t N, int ydt, void* y, int rdt) {
    const int64_t mt = amx_mtiles(M), g = amx_group(M), u0 = i * g, kb_n = amx_kpad(K) / AMX_K;
    const int64_t units = amx_units(N) - u0 < g ? amx_units(N) - u0 : g, bt = kb_n * AMX_N * AMX_K;
    uint16_t pad[AMX_N * AMX_K];
    float c[AMX_N * AMX_N];
    int64_t st;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
#define A(t, u) _tile_loadd(t, amx_a(w, K, N, u, kb, pad, &st), st)
    const int64_t rows_all = (N - u0 * AMX_N < units * AMX_N ? N - u0 * AMX_N : units * AMX_N);
    const char* wi = (const char*)(w + u0 * AMX_N * K);
    for (int64_t kb = 0; kb < kb_n; kb++) {
        const uint16_t* b = xv + kb * AMX_N * AMX_K; /* rows 0-15's B tile; 16 t.. at b + t bt */
        if (kb + AMX_PF < kb_n)
            for (int64_t r = 0; r < rows_all; r++)
                _mm_prefetch(wi + (r * K + (kb + AMX_PF) * AMX_K) * 2, _MM_HINT_T0);
        if (mt == 1) { /* up to 3 units, one B tile */
            _tile_loadd(7, b, 64);
            A(4, u0);
            _tile_dpbf16ps(0, 4, 7);
            if (units > 1) {
                A(5, u0 + 1);
                _tile_dpbf16ps(1, 5, 7);
            }
            if (units > 2) {
                A(6, u0 + 2);
                _tile_dpbf16ps(2, 6, 7);
            }
        } else if (mt == 2) { /* up to 2 units by 2 B tiles */
            _tile_loadd(6, b, 64);
            _tile_loadd(7, b + bt, 64);
            A(4, u0);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (units > 1) {
                A(5, u0 + 1);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        } else { /* one unit by 3 or 4 B tiles; A alternates between two tiles so the next load need not wait */
#define ROWS_OF_X(a)                                \
    do {                                            \
        A(a, u0);                                   \
        _tile_loadd(6, b, 64);                      \
        _tile_dpbf16ps(0, a, 6);                    \
        _tile_loadd(7, b + bt, 64);                 \
        _tile_dpbf16ps(1, a, 7);                    \
        _tile_loadd(6, b + 2 * bt, 64);             \
        _tile_dpbf16ps(2, a, 6);                    \
        if (mt > 3) {                               \
            _tile_loadd(7, b + 3 * bt, 64);         \
            _tile_dpbf16ps(3, a, 7);                \
        }                                           \
    } while (0)
            if (kb & 1) ROWS_OF_X(5);
            else ROWS_OF_X(4);
#undef ROWS_OF_X
        }
    }
#undef A
    for (int64_t j = 0; j < units; j++) {
        const int64_t n0 = (u0 + j) * AMX_N, rows = N - n0 < AMX_N ? N - n0 : AMX_N;
        for (int64_t t = 0; t < mt; t++) { /* c[r][i]: output n0 + r of row 16 t + i */
            amx_store((int)(mt == 1 ? j : mt == 2 ? 2 * j + t : t), c);
            const int64_t m0 = t * AMX_N, mn = M - m0 < AMX_N ? M - m0 : AMX_N;
            for (int64_t i = 0; i < mn; i++)
                for (int64_t r = 0; r < rows; r++) store1(y, ydt, (m0 + i) * N + n0 + r, rnd(c[r * AMX_N + i], rdt));
        }
    }
}

/* y = x w^T for M rows of x (xdt, bf16-exact values) and bf16 w [N][K], into y in ydt rounded to rdt; xv: scratch of
 * amx_pack_size(M, K). Work-shared: every thread of the enclosing parallel region calls it. */
static inline __attribute__((always_inline)) void amx_gemm(const void* x, int xdt, int64_t M, int64_t K,
                                                          const uint16_t* w, int64_t N, uint16_t* xv, int ydt,
                                                          void* y, int rdt) {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < amx_mtiles(M) * AMX_N; m++) amx_pack_row(x, xdt, M, K, m, xv);
    amx_begin();
#pragma omp for schedule(static)
    for (int64_t i = 0; i < amx_items(M, N); i++) amx_item(i, xv, M, K, w, N, ydt, y, rdt);
    amx_end();
}
#else
#define AMX 0
#endif
#endif
