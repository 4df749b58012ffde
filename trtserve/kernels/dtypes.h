/* Element access shared by the C kernels: load 8 or 1 values of a dtype as float32, store one
 * float32 rounded to a dtype (bf16 to nearest even, as torch rounds), round a float32 to a dtype's
 * precision, and a horizontal sum. */
#ifndef TRTSERVE_DTYPES_H
#define TRTSERVE_DTYPES_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

enum { F32 = 0, BF16 = 1, F16 = 2, I8 = 3 }; /* the dtype codes the Python side passes; I8 for weights only */

/* Whether a KV cache in kdt goes with activations in dt: the same dtype, or a float32 model's 16-bit cache
 * (the kv_cache_dtype engine option). */
static inline int cache_dtype_ok(int dt, int kdt) { return kdt == dt || (dt == F32 && (kdt == BF16 || kdt == F16)); }

/* call(d, kd) for the pair (dt, kdt) that cache_dtype_ok allows, both constants: one specialised copy a pair. */
#define CACHE_PAIRS(dt, kdt, call)                      \
    switch ((dt) * 4 + (kdt)) {                         \
    case F32 * 4 + F32: call(F32, F32); break;          \
    case F32 * 4 + BF16: call(F32, BF16); break;        \
    case F32 * 4 + F16: call(F32, F16); break;          \
    case BF16 * 4 + BF16: call(BF16, BF16); break;      \
    default: call(F16, F16);                            \
    }

/* call(d) for the weight dtype dt as a constant: one specialised copy each, where a run-time dt branches on every
 * load of an inner loop. */
#define BY_WDTYPE(dt, call)    \
    switch (dt) {              \
    case F32: call(F32); break; \
    case BF16: call(BF16); break; \
    case F16: call(F16); break; \
    default: call(I8);         \
    }

static inline __attribute__((always_inline)) __m256 load8(const void* p, int dt, int64_t i) {
    if (dt == F32) return _mm256_loadu_ps((const float*)p + i);
    if (dt == I8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)((const int8_t*)p + i))));
    __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)p + i));
    if (dt == BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

static inline __attribute__((always_inline)) float load1(const void* p, int dt, int64_t i) {
    if (dt == F32) return ((const float*)p)[i];
    if (dt == I8) return (float)((const int8_t*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    if (dt == F16) return _cvtsh_ss(h);
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline void store1(void* p, int dt, int64_t i, float f) {
    if (dt == F32) {
        ((float*)p)[i] = f;
    } else if (dt == F16) {
        ((uint16_t*)p)[i] = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    } else { /* bfloat16, round to nearest even as torch does */
        uint32_t b;
        memcpy(&b, &f, 4);
        ((uint16_t*)p)[i] = (b & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}

static inline __attribute__((always_inline)) float rnd(float f, int dt) { /* f rounded to dt and back */
    if (dt == F32) return f;
    uint16_t h;
    store1(&h, dt, 0, f);
    return load1(&h, dt, 0);
}

/* 8 lanes rounded to dt's precision (bf16 to nearest even, fp16 through the F16C conversion), as rnd. */
static inline __attribute__((always_inline)) __m256 rnd8(__m256 v, int dt) {
    if (dt == F32) return v;
    if (dt == F16) return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    const __m256i b = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* 8 float32 lanes stored as dt at p + i, each as store1 stores it (bf16 to nearest even, NaN as 0x7fc0). */
static inline __attribute__((always_inline)) void store8(void* p, int dt, int64_t i, __m256 v) {
    if (dt == F32) {
        _mm256_storeu_ps((float*)p + i, v);
        return;
    }
    __m128i h;
    if (dt == F16) {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    } else {
        const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m256i b = _mm256_srli_epi32(_mm256_castps_si256(rnd8(v, BF16)), 16);
        b = _mm256_blendv_epi8(b, _mm256_set1_epi32(0x7fc0), nan);
        h = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    }
    _mm_storeu_si128((__m128i*)((uint16_t*)p + i), h);
}

/* exp(x) on 8 lanes: x = n ln2 + r (Cody-Waite, |r| <= ln2 / 2), exp(r) by a degree-6 polynomial (Cephes'
 * expf coefficients), times 2^n built in the exponent bits (as two factors, so n may reach 128); inf above
 * 88.72, 0 below -87.34 (where expf's result is subnormal or 0). Every float in [-87, 88] checked against
 * glibc's expf: at most 1 ulp apart. Why: in the decode attention's softmax, glibc's expf one score at a
 * time was a large share of the attention's time. */
static inline __attribute__((always_inline)) __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 e2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 y = _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(p, e1), e2));
    return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
}

/* tanh(x) on 8 lanes, Cephes' tanhf: an odd polynomial below |x| 0.625 (where 1 - 2 / (e^2x + 1) cancels),
 * else 1 - 2 / (exp8(2|x|) + 1) with x's sign; for GeLU's tanh form and Gemma 2's soft-capped scores. */
static inline __attribute__((always_inline)) __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), ax = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    const __m256 e = exp8(_mm256_add_ps(ax, ax));
    const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    const __m256 large = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    return _mm256_blendv_ps(small, large, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_GE_OQ));
}

#ifdef __AVX512F__ /* built so where the CPU has AVX-512 F/DQ/BW/VL (native.py) */
/* 16 values of dt as float32, as load8. */
static inline __attribute__((always_inline)) __m512 load16(const void* p, int dt, int64_t i) {
    if (dt == F32) return _mm512_loadu_ps((const float*)p + i);
    if (dt == I8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)((const int8_t*)p + i))));
    __m256i h = _mm256_loadu_si256((const __m256i*)((const uint16_t*)p + i));
    if (dt == BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* {sum of a, of b, of c, of d}: 6 shuffles and 5 adds for four sums, against 16 and 16 one at a time. */
static inline __attribute__((always_inline)) __m128 hsum4x16(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xee));
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
#endif

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Four sums of 8 lanes {sum of a, of b, of c, of d}, each added up exactly as hsum does. */
static inline __attribute__((always_inline)) __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m128 b0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    __m128 b1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
    __m128 b2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
    __m128 b3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
    _MM_TRANSPOSE4_PS(b0, b1, b2, b3); /* bj: lane j of the four */
    return _mm_add_ps(_mm_add_ps(b0, b2), _mm_add_ps(b1, b3));
}

/* One vector of float32 lanes for the decode GEMM's and attention's tiles: the AVX-512 build's 16 (32
 * registers) or the AVX2 build's 8 (16 registers). vloadw: LANES values of a dtype as float32; vhsum4: four
 * vectors' sums. */
#ifdef __AVX512F__
#define LANES 16
typedef __m512 vec;
#define vzero _mm512_setzero_ps
#define vset1 _mm512_set1_ps
#define vload _mm512_loadu_ps
#define vstore _mm512_storeu_ps
#define vfma _mm512_fmadd_ps
#define vmul _mm512_mul_ps
#define vloadw load16
#define vhsum4 hsum4x16
#else
#define LANES 8
typedef __m256 vec;
#define vzero _mm256_setzero_ps
#define vset1 _mm256_set1_ps
#define vload _mm256_loadu_ps
#define vstore _mm256_storeu_ps
#define vfma _mm256_fmadd_ps
#define vmul _mm256_mul_ps
#define vloadw load8
#define vhsum4 hsum4
#endif

#endif
