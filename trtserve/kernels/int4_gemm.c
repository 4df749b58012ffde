/* W4A16 GEMM for few rows (decode) on x86-64 with AVX2 + FMA, over torch's CPU int4 pack.
 *
 * Why: torch 2.13's `_weight_int4pack_mm_for_cpu` unpacks int4 at about 7 GB/s on an AVX2 CPU at
 * one row, and takes ~30x longer with float32 activations; decode is bandwidth-bound, so the int4
 * engine ran barely faster than int8 on half the bytes. This kernel reads the same packed weights
 * (no second copy) and keeps activations in float32 through the sums.
 *
 * Layouts (torch's `_convert_weight_to_int4pack_for_cpu(q, 1)` on (N, K) values q in [0, 15]; its
 * block width BN is 32 on AVX2 builds and 64 on AVX-512 ones):
 *   w   [N/BN][K][BN/2] bytes; byte j of row k holds output BN*b+j (low nibble), BN*b+j+BN/2 (high)
 *   sz  [K/gs][N][2] scale, zero in bf16 or float32; the weight is (q - 8) * scale + zero
 *   x   [M][K] bf16 or float32, y [M][N] in x's dtype.
 * Per group: sum_k x_k w_k = scale * (sum_k x_k q_k - 8 sum_k x_k) + zero * sum_k x_k.
 * Built and loaded by trtserve/kernels/int4.py; it shares torch's OpenMP runtime.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static inline float load(const void* p, int bf16, int64_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t*)p)[i]) : ((const float*)p)[i];
}

/* 16 packed bytes (32 outputs at one k) -> 4 x 8 floats of q in [0, 15]. */
#define UNPACK(p, w0, w1, w2, w3)                                                  \
    do {                                                                           \
        __m128i v_ = _mm_loadu_si128((const __m128i*)(p));                         \
        __m128i lo_ = _mm_and_si128(v_, mask);                                     \
        __m128i hi_ = _mm_and_si128(_mm_srli_epi16(v_, 4), mask);                  \
        w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo_));                        \
        w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo_, 8)));     \
        w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi_));                        \
        w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi_, 8)));     \
    } while (0)

/* sum_k x[k] q[k, 0..31] over one group of one 32-output unit (16 bytes a row, rows `st` bytes
 * apart), for one row of x. acc[0..15] are the low nibbles' outputs, acc[16..31] the high ones'. */
static void group_dot1(const uint8_t* p, int64_t st, const float* x, int64_t gs, float acc[32]) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m256 w0, w1, w2, w3;
    int64_t k = 0;
    for (; k + 1 < gs; k += 2, p += 2 * st) { /* two chains per output hide the FMA latency */
        __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1);
        UNPACK(p, w0, w1, w2, w3);
        a0 = _mm256_fmadd_ps(w0, x0, a0); a1 = _mm256_fmadd_ps(w1, x0, a1);
        a2 = _mm256_fmadd_ps(w2, x0, a2); a3 = _mm256_fmadd_ps(w3, x0, a3);
        UNPACK(p + st, w0, w1, w2, w3);
        b0 = _mm256_fmadd_ps(w0, x1, b0); b1 = _mm256_fmadd_ps(w1, x1, b1);
        b2 = _mm256_fmadd_ps(w2, x1, b2); b3 = _mm256_fmadd_ps(w3, x1, b3);
    }
    if (k < gs) {
        __m256 x0 = _mm256_broadcast_ss(x + k);
        UNPACK(p, w0, w1, w2, w3);
        a0 = _mm256_fmadd_ps(w0, x0, a0); a1 = _mm256_fmadd_ps(w1, x0, a1);
        a2 = _mm256_fmadd_ps(w2, x0, a2); a3 = _mm256_fmadd_ps(w3, x0, a3);
    }
    _mm256_storeu_ps(acc, _mm256_add_ps(a0, b0));
    _mm256_storeu_ps(acc + 8, _mm256_add_ps(a1, b1));
    _mm256_storeu_ps(acc + 16, _mm256_add_ps(a2, b2));
    _mm256_storeu_ps(acc + 24, _mm256_add_ps(a3, b3));
}

/* The same for two rows of x at once: each unpacked weight feeds both. */
static void group_dot2(const uint8_t* p, int64_t st, const float* x, const float* xb, int64_t gs, float acc[32],
                       float accb[32]) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
    __m256 w0, w1, w2, w3;
    for (int64_t k = 0; k < gs; k++, p += st) {
        __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(xb + k);
        UNPACK(p, w0, w1, w2, w3);
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

/* Returns 0, or -1 when out of memory, or bn is not 32 or 64 or does not divide N (the caller falls back to torch's kernel). */
int trtserve_int4_gemm(const void* x, int x_bf16, int64_t M, int64_t K, const uint8_t* w, int64_t N, int64_t bn,
                       const void* sz, int sz_bf16, int64_t gs, void* y, int threads) {
    if ((bn != 32 && bn != 64) || N % bn != 0) return -1;
    const int64_t ng = K / gs, units = N / 32, st = bn / 2;
    float* xf = malloc(sizeof(float) * (size_t)(M * K + M * ng));
    if (!xf) return -1;
    float* xsum = xf + M * K; /* [M][ng] */
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < ng; g++) {
            float s = 0;
            for (int64_t k = g * gs; k < (g + 1) * gs; k++) s += (xf[m * K + k] = load(x, x_bf16, m * K + k));
            xsum[m * ng + g] = s;
        }
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t u = 0; u < units; u++) {
        /* unit u: 16 bytes of each row of block b = u / (bn / 32), at byte offset h * 16 */
        const int64_t b = u / (bn / 32), h16 = (u % (bn / 32)) * 16;
        const uint8_t* wb = w + b * K * st + h16;
        int64_t idx[32]; /* unit slot -> output */
        for (int j = 0; j < 16; j++) {
            idx[j] = b * bn + h16 + j;
            idx[j + 16] = b * bn + st + h16 + j;
        }
        float out[2][32], acc[2][32], sc[32], ze[32];
        for (int64_t m = 0; m < M; m += 2) {
            const int two = m + 1 < M;
            memset(out, 0, sizeof(out));
            for (int64_t g = 0; g < ng; g++) {
                for (int j = 0; j < 32; j++) {
                    int64_t i = (g * N + idx[j]) * 2;
                    sc[j] = load(sz, sz_bf16, i);
                    ze[j] = load(sz, sz_bf16, i + 1);
                }
                const float* xm = xf + m * K + g * gs;
                if (two) group_dot2(wb + g * gs * st, st, xm, xm + K, gs, acc[0], acc[1]);
                else group_dot1(wb + g * gs * st, st, xm, gs, acc[0]);
                for (int r = 0; r <= two; r++) {
                    float s = xsum[(m + r) * ng + g];
                    for (int j = 0; j < 32; j++) out[r][j] += sc[j] * (acc[r][j] - 8.0f * s) + ze[j] * s;
                }
            }
            for (int r = 0; r <= two; r++) {
                for (int j = 0; j < 32; j++) {
                    int64_t o = (m + r) * N + idx[j];
                    if (x_bf16) ((uint16_t*)y)[o] = f32_to_bf16(out[r][j]);
                    else ((float*)y)[o] = out[r][j];
                }
            }
        }
    }
    free(xf);
    return 0;
}
