/* The W4A16 GEMM's per-unit math over torch's CPU int4 pack, shared by int4_gemm.c (one GEMM a
 * call) and decode_layers.c (every layer of a decode step in one call), so both compute each output
 * with the same operations in the same order and round it alike.
 *
 * Layouts (torch's `_convert_weight_to_int4pack_for_cpu(q, 1)` on (N, K) values q in [0, 15]; its
 * block width BN is 32 on AVX2 builds and 64 on AVX-512 ones):
 *   w   [N/BN][K][BN/2] bytes; byte j of row k holds output BN*b+j (low nibble), BN*b+j+BN/2 (high)
 *   sz  [K/gs][N][2] scale, zero in bf16 or float32; the weight is (q - 8) * scale + zero
 *   xf  [M][K] float32 (values of the activation dtype), xsum [M][K/gs] its sums per group.
 * Per group: sum_k x_k w_k = scale * (sum_k x_k q_k - 8 sum_k x_k) + zero * sum_k x_k.
 * Work is split in units of 32 outputs (16 bytes of each row of one block), or of a whole 64-output
 * block on the AVX-512 build (int4_width).
 */
#ifndef TRTSERVE_INT4_H
#define TRTSERVE_INT4_H
#include "dtypes.h"

enum { I4 = 4 }; /* decode_layers' weight dtype code for this pack (W4A16), next to dtypes.h's */

static inline int int4_block_ok(int64_t bn, int64_t N) { return (bn == 32 || bn == 64) && N % bn == 0; }

/* Outputs a work unit: 32 (16 bytes of each row of a block), or on the AVX-512 build with 64-output
 * blocks the whole block (32 bytes a row: each cache line read by one unit, not two). */
static inline int64_t int4_width(int64_t bn) {
#ifdef __AVX512F__
    if (bn == 64) return 64;
#endif
    (void)bn;
    return 32;
}

static inline int64_t int4_units(int64_t N, int64_t bn) { return N / int4_width(bn); }

/* 16 packed bytes (32 outputs at one k) -> 4 x 8 floats of q in [0, 15]. */
#define INT4_UNPACK(p, w0, w1, w2, w3)                                             \
    do {                                                                           \
        __m128i v_ = _mm_loadu_si128((const __m128i*)(p));                         \
        __m128i lo_ = _mm_and_si128(v_, mask);                                     \
        __m128i hi_ = _mm_and_si128(_mm_srli_epi16(v_, 4), mask);                  \
        w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo_));                        \
        w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo_, 8)));     \
        w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi_));                        \
        w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi_, 8)));     \
    } while (0)

#ifdef __AVX512F__
/* The AVX-512 build: 16 lanes, the low nibbles' 16 outputs in one vector and the high ones' in another.
 * Each output is its own lane, summed over k in the same order as the 8-lane code: the same bits
 * (checked: both builds, float32 and bf16, 1-8 rows of TinyLlama's fc_gate) in half the conversions,
 * and the rows INT4_PF ahead prefetched (the unit reads 16 bytes of each 32-byte row: a stride the
 * hardware prefetcher followed too slowly). With torch's 64-output blocks a unit is the whole block
 * (int4_width), its scales and zeros loaded and applied 16 at a time. */
#define INT4_PF 64
#define INT4_SZ_PF 2 /* groups ahead whose scales a 64-output unit prefetches */
#define INT4_Q8_PF 4096 /* bytes ahead in a block that the int8-activation path prefetches (128 rows) */
#define INT4_UNPACK16(p, lo, hi)                                                       \
    do {                                                                               \
        __m128i v_ = _mm_loadu_si128((const __m128i*)(p));                             \
        lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v_, mask)));        \
        hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v_, 4), mask))); \
    } while (0)

/* sum_k x[k] q[k, ...] over one group of nb 16-byte pieces of each row (nb 1: a 32-output unit, 2: a
 * 64-output block; a constant after inlining), rows `st` bytes apart, one row of x: acc[0, 16 nb) the low
 * nibbles' outputs, acc[16 nb, 32 nb) the high ones'. Two chains per output (even and odd k) hide the FMA
 * latency, added at the end, as the 8-lane code does. */
static inline __attribute__((always_inline)) void int4_dot1x16(const uint8_t* p, int64_t st, const float* x,
                                                              int64_t gs, int nb, float* acc) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m512 a[4], b[4], w[4]; /* [0, nb) low nibbles, [nb, 2 nb) high */
    for (int i = 0; i < 2 * nb; i++) a[i] = b[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 1 < gs; k += 2, p += 2 * st) {
        const __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]);
        _mm_prefetch((const char*)p + INT4_PF * st, _MM_HINT_T0);
        _mm_prefetch((const char*)p + (INT4_PF + 1) * st, _MM_HINT_T0);
        for (int c = 0; c < nb; c++) INT4_UNPACK16(p + 16 * c, w[c], w[nb + c]);
        for (int i = 0; i < 2 * nb; i++) a[i] = _mm512_fmadd_ps(w[i], x0, a[i]);
        for (int c = 0; c < nb; c++) INT4_UNPACK16(p + st + 16 * c, w[c], w[nb + c]);
        for (int i = 0; i < 2 * nb; i++) b[i] = _mm512_fmadd_ps(w[i], x1, b[i]);
    }
    if (k < gs) {
        const __m512 x0 = _mm512_set1_ps(x[k]);
        for (int c = 0; c < nb; c++) INT4_UNPACK16(p + 16 * c, w[c], w[nb + c]);
        for (int i = 0; i < 2 * nb; i++) a[i] = _mm512_fmadd_ps(w[i], x0, a[i]);
    }
    for (int i = 0; i < 2 * nb; i++) _mm512_storeu_ps(acc + 16 * i, _mm512_add_ps(a[i], b[i]));
}

/* The same for two rows of x at once (one chain per output and row, as the 8-lane code). */
static inline __attribute__((always_inline)) void int4_dot2x16(const uint8_t* p, int64_t st, const float* x,
                                                              const float* xb, int64_t gs, int nb, float* acc,
                                                              float* accb) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m512 a[4], c2[4], w[4];
    for (int i = 0; i < 2 * nb; i++) a[i] = c2[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < gs; k++, p += st) {
        const __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(xb[k]);
        _mm_prefetch((const char*)p + INT4_PF * st, _MM_HINT_T0);
        for (int c = 0; c < nb; c++) INT4_UNPACK16(p + 16 * c, w[c], w[nb + c]);
        for (int i = 0; i < 2 * nb; i++) {
            a[i] = _mm512_fmadd_ps(w[i], x0, a[i]);
            c2[i] = _mm512_fmadd_ps(w[i], x1, c2[i]);
        }
    }
    for (int i = 0; i < 2 * nb; i++) {
        _mm512_storeu_ps(acc + 16 * i, a[i]);
        _mm512_storeu_ps(accb + 16 * i, c2[i]);
    }
}

/* sc[0..63], ze[0..63] from 64 (scale, zero) pairs at element i of sz (F32 or BF16). */
static inline void int4_scales64(const void* sz, int szdt, int64_t i, float* sc, float* ze) {
    for (int c = 0; c < 4; c++) { /* 16 pairs at a time */
        if (szdt == BF16) {
            const __m512i pr = _mm512_loadu_si512((const uint16_t*)sz + i + 32 * c); /* 16 x (scale | zero << 16) */
            _mm512_storeu_ps(sc + 16 * c, _mm512_castsi512_ps(_mm512_slli_epi32(pr, 16)));
            _mm512_storeu_ps(ze + 16 * c, _mm512_castsi512_ps(_mm512_and_si512(pr, _mm512_set1_epi32((int)0xffff0000u))));
        } else {
            const float* f = (const float*)sz + i + 32 * c;
            const __m512 lo = _mm512_loadu_ps(f), hi = _mm512_loadu_ps(f + 16);
            const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            _mm512_storeu_ps(sc + 16 * c, _mm512_permutex2var_ps(lo, ev, hi));
            _mm512_storeu_ps(ze + 16 * c, _mm512_permutex2var_ps(lo, od, hi));
        }
    }
}
#else
/* sum_k x[k] q[k, 0..31] over one group of one unit (16 bytes a row, rows `st` bytes apart), for
 * one row of x. acc[0..15] are the low nibbles' outputs, acc[16..31] the high ones'. */
static void int4_group_dot1(const uint8_t* p, int64_t st, const float* x, int64_t gs, float acc[32]) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m256 w0, w1, w2, w3;
    int64_t k = 0;
    for (; k + 1 < gs; k += 2, p += 2 * st) { /* two chains per output hide the FMA latency */
        __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1);
        INT4_UNPACK(p, w0, w1, w2, w3);
        a0 = _mm256_fmadd_ps(w0, x0, a0); a1 = _mm256_fmadd_ps(w1, x0, a1);
        a2 = _mm256_fmadd_ps(w2, x0, a2); a3 = _mm256_fmadd_ps(w3, x0, a3);
        INT4_UNPACK(p + st, w0, w1, w2, w3);
        b0 = _mm256_fmadd_ps(w0, x1, b0); b1 = _mm256_fmadd_ps(w1, x1, b1);
        b2 = _mm256_fmadd_ps(w2, x1, b2); b3 = _mm256_fmadd_ps(w3, x1, b3);
    }
    if (k < gs) {
        __m256 x0 = _mm256_broadcast_ss(x + k);
        INT4_UNPACK(p, w0, w1, w2, w3);
        a0 = _mm256_fmadd_ps(w0, x0, a0); a1 = _mm256_fmadd_ps(w1, x0, a1);
        a2 = _mm256_fmadd_ps(w2, x0, a2); a3 = _mm256_fmadd_ps(w3, x0, a3);
    }
    _mm256_storeu_ps(acc, _mm256_add_ps(a0, b0));
    _mm256_storeu_ps(acc + 8, _mm256_add_ps(a1, b1));
    _mm256_storeu_ps(acc + 16, _mm256_add_ps(a2, b2));
    _mm256_storeu_ps(acc + 24, _mm256_add_ps(a3, b3));
}

/* The same for two rows of x at once: each unpacked weight feeds both. */
static void int4_group_dot2(const uint8_t* p, int64_t st, const float* x, const float* xb, int64_t gs, float acc[32],
                            float accb[32]) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
    __m256 w0, w1, w2, w3;
    for (int64_t k = 0; k < gs; k++, p += st) {
        __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(xb + k);
        INT4_UNPACK(p, w0, w1, w2, w3);
        a0 = _mm256_fmadd_ps(w0, x0, a0); a1 = _mm256_fmadd_ps(w1, x0, a1);
        a2 = _mm256_fmadd_ps(w2, x0, a2); a3 = _mm256_fmadd_ps(w3, x0, a3);
        c0 = _mm256_fmadd_ps(w0, x1, c0); c1 = _mm256_fmadd_ps(w1, x1, c1);
        c2 = _mm256_fmadd_ps(w2, x1, c2); c3 = _mm256_fmadd_ps(w3, x1, c3);
    }
    _mm256_storeu_ps(acc, a0); _mm256_storeu_ps(acc + 8, a1);
    _mm256_storeu_ps(acc + 16, a2); _mm256_storeu_ps(acc + 24, a3);
    _mm256_storeu_ps(accb, c0); _mm256_storeu_ps(accb + 8, c1);
    _mm256_storeu_ps(accb + 16, c2); _mm256_storeu_ps(accb + 24, c3);
}

#endif

/* int8 activations (RuntimeConfig.int8_activations, opt-in; the AVX-512 build on CPUs with VNNI and
 * VBMI, 64-output blocks): each row of x rounded to int8 per group of the weights' groups, scale d =
 * amax / 127 (llama.cpp's q8_0 does the same per 32 inputs), so a group's dots are exact int32 sums of
 * q in [0, 15] times x_q in [-127, 127] (vpdpbusd, 64 products an instruction), scaled by d after: an
 * approximation of the float path, not its bits. */
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define INT4_Q8 1
#else
#define INT4_Q8 0
#endif

/* x[0..gs) -> q (int8, nearest even), its sum, and the scale d with x ~ d q. NaN counts as 0. */
static inline void int4_quant_group(const float* x, int64_t gs, int8_t* q, int32_t* qsum, float* d) {
    float amax = 0.0f;
    for (int64_t k = 0; k < gs; k++) {
        const float a = x[k] < 0 ? -x[k] : x[k];
        amax = a > amax ? a : amax;
    }
    const float s = amax / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < gs; k++) {
        float v = __builtin_rintf(x[k] * inv);
        v = v != v ? 0.0f : (v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v));
        q[k] = (int8_t)v;
        sum += q[k];
    }
    *qsum = sum;
    *d = s;
}

#if INT4_Q8
static const uint8_t INT4_Q8_GATHER[64] = { /* 4 j + i -> 32 i + j: row i's byte j */
    0, 32, 64, 96, 1, 33, 65, 97, 2, 34, 66, 98, 3, 35, 67, 99, 4, 36, 68, 100, 5, 37, 69, 101,
    6, 38, 70, 102, 7, 39, 71, 103, 8, 40, 72, 104, 9, 41, 73, 105, 10, 42, 74, 106, 11, 43, 75, 107,
    12, 44, 76, 108, 13, 45, 77, 109, 14, 46, 78, 110, 15, 47, 79, 111};

/* acc[c] += the four 4-byte dots of w[c]'s lanes with x[0..3] */
static inline __attribute__((always_inline)) void int4_q8_dots(__m512i* acc, const __m512i* w, const int8_t* x) {
    int32_t x4;
    memcpy(&x4, x, 4);
    const __m512i xv = _mm512_set1_epi32(x4);
    for (int c = 0; c < 4; c++) acc[c] = _mm512_dpbusd_epi32(acc[c], w[c], xv);
}

static inline __attribute__((always_inline)) void int4_q8_step(const uint8_t* p, const int8_t* xa, const int8_t* xb,
                                                              __m512i* a, __m512i* ab) {
    const __m512i idx0 = _mm512_loadu_si512(INT4_Q8_GATHER); /* lane j: byte j of rows 0..3 */
    const __m512i idx1 = _mm512_add_epi8(idx0, _mm512_set1_epi8(16)); /* bytes 16..31 */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    _mm_prefetch((const char*)p + INT4_Q8_PF, _MM_HINT_T0);
    _mm_prefetch((const char*)p + INT4_Q8_PF + 64, _MM_HINT_T0);
    const __m512i r01 = _mm512_loadu_si512(p), r23 = _mm512_loadu_si512(p + 64);
    const __m512i v0 = _mm512_permutex2var_epi8(r01, idx0, r23), v1 = _mm512_permutex2var_epi8(r01, idx1, r23);
    const __m512i w[4] = {_mm512_and_si512(v0, m4), _mm512_and_si512(v1, m4),
                          _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4)};
    int4_q8_dots(a, w, xa);
    if (xb) int4_q8_dots(ab, w, xb);
}

/* One group of a 64-output block (rows 32 bytes apart) dotted with one or two rows of int8 x (xb
 * NULL: one): acc[r][j] = d[r] * sum_k q[k, j] x_q[r][k]. Four k a step: vpermt2b gathers each
 * output's four bytes (rows k..k+3) into one 32-bit lane, nibbles split by mask and shift. */
static inline __attribute__((always_inline)) void int4_dot_q8(const uint8_t* p, const int8_t* xa, const int8_t* xb,
                                                             int64_t gs, const float* d, float acc[2][64]) {
    __m512i a[4], b[4], c[4], e[4]; /* row a: chains a (k / 4 even), b (odd); row b: c, e */
    for (int i = 0; i < 4; i++) a[i] = b[i] = c[i] = e[i] = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 8 <= gs; k += 8, p += 256) {
        int4_q8_step(p, xa + k, xb ? xb + k : NULL, a, c);
        int4_q8_step(p + 128, xa + k + 4, xb ? xb + k + 4 : NULL, b, e);
    }
    if (k < gs) int4_q8_step(p, xa + k, xb ? xb + k : NULL, a, c); /* gs % 8 == 4 */
    for (int i = 0; i < 4; i++) { /* sums below 2^24: exact in float32 */
        _mm512_storeu_ps(acc[0] + 16 * i, _mm512_mul_ps(_mm512_set1_ps(d[0]), _mm512_cvtepi32_ps(_mm512_add_epi32(a[i], b[i]))));
        if (xb)
            _mm512_storeu_ps(acc[1] + 16 * i,
                             _mm512_mul_ps(_mm512_set1_ps(d[1]), _mm512_cvtepi32_ps(_mm512_add_epi32(c[i], e[i]))));
    }
}
#endif

/* sum of x[0..gs) in order: the xsum of one row's group. */
static inline float int4_group_sum(const float* x, int64_t gs) {
    float s = 0;
    for (int64_t k = 0; k < gs; k++) s += x[k];
    return s;
}

/* Whether asked-for int8 activations run: built (INT4_Q8), 64-output units, groups of 4k inputs. */
static inline int int4_q8_ok(int64_t bn, int64_t gs) { return INT4_Q8 && int4_width(bn) == 64 && gs % 4 == 0; }

/* Group i (row i / ng, group i % ng) of x [M][K] made ready for int4_unit: its sum xsum[i]; or, q8,
 * its int8 values (at the group's place in xq [M][K]), their sum xqs[i] and scale xsum[i]. */
static inline void int4_prepare_group(const float* x, int64_t i, int64_t K, int64_t gs, int q8, float* xsum,
                                      int32_t* xqs, int8_t* xq) {
    const int64_t ng = K / gs, at = i / ng * K + i % ng * gs;
    if (q8) int4_quant_group(x + at, gs, xq + at, xqs + i, xsum + i);
    else xsum[i] = int4_group_sum(x + at, gs);
}

/* The int4_width(bn) outputs of unit u of y = x w^T for all M rows (one work item), stored in ydt after
 * rounding to rdt. sz is in szdt (F32 or BF16). xq (int8 x [M][K]), xqs and xd ([M][K/gs] sums and
 * scales): the int8-activation path, given only where int4_q8_ok; NULL: the float path (xsum). */
static inline void int4_unit(int64_t u, const float* xf, const float* xsum, int64_t M, int64_t K, const uint8_t* w,
                             int64_t N, int64_t bn, const void* sz, int szdt, int64_t gs, void* y, int ydt, int rdt,
                             const int8_t* xq, const int32_t* xqs, const float* xd) {
    const int64_t ng = K / gs, st = bn / 2, W = int4_width(bn), half = W / 2;
    /* unit u: `half` bytes of each row of block b = u / (bn / W), at byte offset h */
    const int64_t b = u / (bn / W), h = (u % (bn / W)) * half;
    const uint8_t* wb = w + b * K * st + h;
    int64_t idx[64]; /* unit slot -> output */
    for (int j = 0; j < half; j++) {
        idx[j] = b * bn + h + j;
        idx[j + half] = b * bn + st + h + j;
    }
    float out[2][64], acc[2][64], sc[64], ze[64];
    for (int64_t m = 0; m < M; m += 2) {
        const int two = m + 1 < M;
        memset(out, 0, sizeof(out));
        for (int64_t g = 0; g < ng; g++) {
#ifdef __AVX512F__
            if (W == 64 && g + INT4_SZ_PF < ng) { /* a later group's pairs: N pairs apart, no stream to follow */
                const char* next = (const char*)sz + ((g + INT4_SZ_PF) * N + idx[0]) * 2 * (szdt == BF16 ? 2 : 4);
                for (int c = 0; c < (szdt == BF16 ? 4 : 8); c++) _mm_prefetch(next + 64 * c, _MM_HINT_T0);
            }
            if (W == 64) /* the block's 64 (scale, zero) pairs lie side by side */
                int4_scales64(sz, szdt, (g * N + idx[0]) * 2, sc, ze);
            else
#endif
            for (int j = 0; j < W; j++) {
                int64_t i = (g * N + idx[j]) * 2;
                sc[j] = load1(sz, szdt, i);
                ze[j] = load1(sz, szdt, i + 1);
            }
            const float* xm = xf + m * K + g * gs;
            const uint8_t* p = wb + g * gs * st;
#if INT4_Q8
            if (xq) {
                const float dd[2] = {xd[m * ng + g], two ? xd[(m + 1) * ng + g] : 0.0f};
                int4_dot_q8(p, xq + m * K + g * gs, two ? xq + (m + 1) * K + g * gs : NULL, gs, dd, acc);
            } else
#endif
#ifdef __AVX512F__
            if (W == 64 && two) int4_dot2x16(p, st, xm, xm + K, gs, 2, acc[0], acc[1]);
            else if (W == 64) int4_dot1x16(p, st, xm, gs, 2, acc[0]);
            else if (two) int4_dot2x16(p, st, xm, xm + K, gs, 1, acc[0], acc[1]);
            else int4_dot1x16(p, st, xm, gs, 1, acc[0]);
#else
            if (two) int4_group_dot2(p, st, xm, xm + K, gs, acc[0], acc[1]);
            else int4_group_dot1(p, st, xm, gs, acc[0]);
#endif
            for (int r = 0; r <= two; r++) {
                const int64_t i = (m + r) * ng + g; /* int8 x: sum_k x_k ~ d sum_k x_q[k] */
                const float s = xq ? xd[i] * (float)xqs[i] : xsum[i];
                int j = 0;
#ifdef __AVX512F__ /* the scalar expression's operations, one rounding each, 16 lanes at a time */
                const __m512 s8 = _mm512_set1_ps(8.0f * s), sv = _mm512_set1_ps(s);
                for (; j + 16 <= W; j += 16) {
                    const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(sc + j), _mm512_sub_ps(_mm512_loadu_ps(acc[r] + j), s8));
                    const __m512 v = _mm512_add_ps(t, _mm512_mul_ps(_mm512_loadu_ps(ze + j), sv));
                    _mm512_storeu_ps(out[r] + j, _mm512_add_ps(_mm512_loadu_ps(out[r] + j), v));
                }
#endif
                for (; j < W; j++) out[r][j] += sc[j] * (acc[r][j] - 8.0f * s) + ze[j] * s;
            }
        }
        for (int r = 0; r <= two; r++)
            for (int j = 0; j < W; j++) store1(y, ydt, (m + r) * N + idx[j], rnd(out[r][j], rdt));
    }
}

#endif
