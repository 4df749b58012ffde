// Widening of e4m3 and 4-bit weights to float32 or bfloat16 (the GEMM's dtype), a slab of output rows
// at a time, for the quantized linears' prefill GEMM (trtserve/models/quantized.py), and the e4m3 and
// int8 rounding of their activations.
// Built by trtserve/kernels/native.py; trtserve/kernels/widen.py holds the torch equivalents.
//
// Every value is the one torch's elementwise ops give for the same formula: each product is one
// float32 rounding (no contraction, see native.FLAGS), e4m3 and bfloat16 rounding are c10's
// (round to nearest even), and the widening tables (byte -> value) are handed in, computed by torch.

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

// (unions, not memcpy: loops over these then vectorize)
static inline float from_bits(uint32_t u) {
    const union { uint32_t u; float f; } v = {.u = u};
    return v.f;
}

static inline uint32_t to_bits(float f) {
    const union { float f; uint32_t u; } v = {.f = f};
    return v.u;
}

// float32 -> bfloat16 -> float32 as c10::BFloat16 rounds (nearest even; NaN stays NaN); branch-free,
// so loops over it vectorize.
static inline float round_bf16(float f) {
    const uint32_t u = to_bits(f);
    const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    return f != f ? f : from_bits(r);
}

// float32 -> bfloat16 bits as c10 converts (nearest even; NaN -> 0x7FC0)
static inline uint16_t bf16_bits(float f) {
    return f != f ? (uint16_t)0x7FC0 : (uint16_t)(to_bits(round_bf16(f)) >> 16);
}

// e4m3(clamp(v * mult, +-448)) * inv: ModelOpt's fake quantization as _fp8_fake_quant computes it,
// with the value of c10's fp8e4m3fn_from_fp32_value byte computed in place (no table: loops over it
// vectorize). |v| >= 480 (after the clamp: NaN) -> NaN; below 2^-6 (e4m3's subnormals) by adding
// 2^14, whose float32 ulp is their step 2^-9 (the add rounds to nearest even), and subtracting it
// again (exact); normals by rounding the float32 to 3 mantissa bits (a biased add on the bits: the
// byte's exponent and mantissa, kept as a float32).
static inline float fp8_round(float v, float mult, float inv) {
    v = v * mult;
    v = v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v);  // NaN passes, as torch.clamp's does
    const uint32_t u = to_bits(v), sign = u & 0x80000000u, a = u ^ sign;
    const float sub = (from_bits(a) + 16384.0f) - 16384.0f;
    const float normal = from_bits((a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u);  // 3 mantissa bits, nearest even
    // NaN: the float32 torch makes of e4m3's NaN byte 0x7F (its mantissa bits on top: 0x7FF00000)
    const float mag = a >= (1087u << 20) ? from_bits(0x7FF00000u) : (a < (121u << 23) ? sub : normal);
    const float r = from_bits(to_bits(mag) | sign) * inv;
    return inv != inv ? inv : r;  // a NaN scale's bits, as torch's product gives them (the compiler may swap operands)
}

// Stores of a widened value: float32, or bfloat16 bits (the value already rounded to bfloat16, or
// rounded here as torch's .to(torch.bfloat16)); `ob` is a constant where these are inlined, so each
// loop is compiled once per output type.
static inline __attribute__((always_inline)) void put(void *y, int64_t i, float v, int ob) {
    if (ob)
        ((uint16_t *)y)[i] = bf16_bits(v);
    else
        ((float *)y)[i] = v;
}

// x[c] of a float32 row, or (ib) of a bfloat16 row
static inline __attribute__((always_inline)) float get(const void *x, int64_t c, int ib) {
    return ib ? from_bits((uint32_t)((const uint16_t *)x)[c] << 16) : ((const float *)x)[c];
}

// One row of fp8_round, read as float32 or (ib) bfloat16 and written as float32 or (ob) bfloat16 (bf16:
// rounded to it).
static inline __attribute__((always_inline)) void fp8_row(const void *x, int64_t k, float m, float iv, int bf16,
                                                          void *y, int ib, int ob) {
    if (ob)  // put rounds to bfloat16
        for (int64_t c = 0; c < k; c++) put(y, c, fp8_round(get(x, c, ib), m, iv), 1);
    else if (bf16)
        for (int64_t c = 0; c < k; c++) put(y, c, round_bf16(fp8_round(get(x, c, ib), m, iv)), 0);
    else
        for (int64_t c = 0; c < k; c++) put(y, c, fp8_round(get(x, c, ib), m, iv), 0);
}

// max |x| over a row of float32 or (ib) bfloat16; NaN if any is (as torch's amax). On the bits: with
// the sign cleared, floats order as unsigned integers, inf below every NaN; so an integer max, 16
// bf16 or 8 float32 values an instruction, and NaN where the largest bits are past inf's.
static inline __attribute__((always_inline)) float row_amax(const void *x, int64_t k, int ib) {
    uint32_t m = 0;
    int64_t c = 0;
    if (ib) {
        const uint16_t *xb = (const uint16_t *)x;
        __m256i mv = _mm256_setzero_si256();
        for (; c + 16 <= k; c += 16)
            mv = _mm256_max_epu16(mv, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(xb + c)), _mm256_set1_epi16(0x7FFF)));
        uint16_t lanes[16];
        _mm256_storeu_si256((__m256i *)lanes, mv);
        for (int j = 0; j < 16; j++) m = lanes[j] > m ? lanes[j] : m;
        for (; c < k; c++) m = (xb[c] & 0x7FFFu) > m ? (xb[c] & 0x7FFFu) : m;
        m <<= 16;
    } else {
        const float *xf = (const float *)x;
        __m256i mv = _mm256_setzero_si256();
        for (; c + 8 <= k; c += 8)
            mv = _mm256_max_epu32(mv, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(xf + c)), _mm256_set1_epi32(0x7FFFFFFF)));
        uint32_t lanes[8];
        _mm256_storeu_si256((__m256i *)lanes, mv);
        for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
        for (; c < k; c++) m = (to_bits(xf[c]) & 0x7FFFFFFFu) > m ? (to_bits(xf[c]) & 0x7FFFFFFFu) : m;
    }
    return m > 0x7F800000u ? __builtin_nanf("") : from_bits(m);
}

// y (rows, k) = fp8_round(x) with row r's (mult, inv) at index r (per_row) or 0; mult NULL: per
// token, from the row's amax as Fp8Linear computes it in torch (scale = max(amax, 2^-24) / 448,
// mult = 448 / (scale * 448), inv = 1 / mult, each a float32 op). bf16: then rounded to bfloat16. x:
// float32, or bfloat16 (in_bf16); y: float32, or bfloat16 (out_bf16, with bf16).
int trtserve_fp8_round(const void *x, int64_t rows, int64_t k, const float *mult, const float *inv, int64_t per_row,
                       int bf16, int64_t in_bf16, int64_t out_bf16, void *y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const void *xr = in_bf16 ? (const void *)((const uint16_t *)x + r * k) : (const void *)((const float *)x + r * k);
        void *yr = out_bf16 ? (void *)((uint16_t *)y + r * k) : (void *)((float *)y + r * k);
        float m, iv;
        if (mult) {
            m = mult[per_row ? r : 0], iv = inv[per_row ? r : 0];
        } else {
            float amax = in_bf16 ? row_amax(xr, k, 1) : row_amax(xr, k, 0);
            amax = amax < 0x1p-24f ? 0x1p-24f : amax;
            m = (1.0f / ((amax / 448.0f) * 448.0f)) * 448.0f;  // torch's 448 / t is reciprocal(t) * 448
            iv = 1.0f / m;
        }
        if (in_bf16 && out_bf16)
            fp8_row(xr, k, m, iv, 1, yr, 1, 1);
        else if (in_bf16)
            fp8_row(xr, k, m, iv, bf16, yr, 1, 0);
        else if (out_bf16)
            fp8_row(xr, k, m, iv, 1, yr, 0, 1);
        else
            fp8_row(xr, k, m, iv, bf16, yr, 0, 0);
    }
    return 0;
}

// W8A8 SmoothQuant's per-token int8 rounding, as Int8SmoothQuant computes it in torch: scale[r] =
// max(amax, 1e-8) / 127, q = clamp(rint(x / scale), +-127) (nearest even), held in float32.
int trtserve_int8_round(const float *x, int64_t rows, int64_t k, float *q, float *scale, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * k;
        float amax = row_amax(xr, k, 0);
        const float s = (amax < 1e-8f ? 1e-8f : amax) / 127.0f;
        scale[r] = s;
        float *qr = q + r * k;
        for (int64_t c = 0; c < k; c++) {
            const float v = __builtin_rintf(xr[c] / s);
            qr[c] = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
        }
    }
    return 0;
}

// One row of scale_outer: y read as float32, int32 (ii) or bfloat16 (ib), out float32 or (ob) bfloat16.
static inline __attribute__((always_inline)) void scale_row(const void *y, float rs, const float *col, int64_t n,
                                                            void *out, int ii, int ib, int ob) {
    for (int64_t j = 0; j < n; j++) {
        const float v = ii ? (float)((const int32_t *)y)[j] : get(y, j, ib);
        put(out, j, v * (rs * col[j]), ob);
    }
}

// out (rows, n) = y * (row[r] * col[j]): the per-token times per-channel scales of an int8 GEMM, or
// (row NULL: 1) a per-channel scale. y: float32 (in_type 0), int32 sums (1; converted to float32
// as torch's .float(), nearest) or bfloat16 (2); out: float32 or (out_bf16) bfloat16 bits rounded as
// torch's .to(torch.bfloat16); out may be y.
int trtserve_scale_outer(const void *y, int64_t in_type, int64_t rows, int64_t n, const float *row, const float *col,
                         int64_t out_bf16, void *out, int threads) {
    const int64_t in_size = in_type == 2 ? 2 : 4, out_size = out_bf16 ? 2 : 4;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const void *yr = (const char *)y + r * n * in_size;
        void *o = (char *)out + r * n * out_size;
        const float rs = row ? row[r] : 1.0f;
        if (in_type == 1 && out_bf16)
            scale_row(yr, rs, col, n, o, 1, 0, 1);
        else if (in_type == 1)
            scale_row(yr, rs, col, n, o, 1, 0, 0);
        else if (in_type == 2)
            scale_row(yr, rs, col, n, o, 0, 1, (int)out_bf16);
        else if (out_bf16)
            scale_row(yr, rs, col, n, o, 0, 0, 1);
        else
            scale_row(yr, rs, col, n, o, 0, 0, 0);
    }
    return 0;
}

#ifndef __AVX512BW__
static void gather_row16(const uint8_t *restrict w, const uint32_t *restrict lut, uint16_t *restrict y, int64_t k) {
    for (int64_t c = 0; c < k; c++) y[c] = (uint16_t)lut[w[c]];
}
#endif

static void gather_row32(const uint8_t *restrict w, const uint32_t *restrict lut, uint32_t *restrict y, int64_t k) {
    for (int64_t c = 0; c < k; c++) y[c] = lut[w[c]];
}

#ifdef __AVX512BW__
// gather_row16 by vpermt2w: the 256 bfloat16 entries in 8 registers, 64 a pair, bits 6 and 7 of
// each code choosing the pair; 32 codes a step.
static void lut_row16(const uint8_t *w, const __m512i *tab, uint16_t *y, int64_t k) {
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
        const __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w + c)));
        const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
        const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
        const __m512i lo = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(tab[0], idx, tab[1]),
                                                   _mm512_permutex2var_epi16(tab[2], idx, tab[3]));
        const __m512i hi = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(tab[4], idx, tab[5]),
                                                   _mm512_permutex2var_epi16(tab[6], idx, tab[7]));
        _mm512_storeu_si512((void *)(y + c), _mm512_mask_blend_epi16(b7, lo, hi));
    }
    const uint16_t *t = (const uint16_t *)tab;
    for (; c < k; c++) y[c] = t[w[c]];
}
#endif

// y (rows, k) = lut[w] for a (rows, k) slab of byte codes (e4m3, ...); lut: 256 32-bit words, float32
// values (esize 4) or bfloat16 bits in the low half (esize 2: y holds bfloat16).
int trtserve_widen_bytes(const uint8_t *w, int64_t rows, int64_t k, const uint32_t *lut, int64_t esize, void *y,
                         int threads) {
#pragma omp parallel num_threads(threads)
    {
#ifdef __AVX512BW__
        __m512i tab[8];  // the bfloat16 entries, 32 a register
        uint16_t *t = (uint16_t *)tab;
        for (int i = 0; i < 256; i++) t[i] = (uint16_t)lut[i];
#endif
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (esize == 2)
#ifdef __AVX512BW__
                lut_row16(w + r * k, tab, (uint16_t *)y + r * k, k);
#else
                gather_row16(w + r * k, lut, (uint16_t *)y + r * k, k);
#endif
            else
                gather_row32(w + r * k, lut, (uint32_t *)y + r * k, k);
        }
    }
    return 0;
}

#ifdef __AVX512F__
// 16 values to y[i..i+16]: float32, or bfloat16 bits (the values already rounded to bfloat16)
static inline __attribute__((always_inline)) void put16(void *y, int64_t i, __m512 v, int ob) {
    if (ob)
        _mm256_storeu_si256((__m256i *)((uint16_t *)y + i),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    else
        _mm512_storeu_ps((float *)y + i, v);
}

// nibble_row's lookups for inputs c0 .. c0 + n (n a multiple of 16) of row r, by vpermps from the
// group's 16 values: the scalar loops' values.
static inline __attribute__((always_inline)) void nibbles16(const uint8_t *w, int64_t layout, int64_t r, int64_t k,
                                                            int64_t c0, int64_t n, const float *table, void *y,
                                                            int64_t y0, int ob) {
    const __m512 tv = _mm512_loadu_ps(table);
    const __m512i low4 = _mm512_set1_epi32(15);
    if (layout == 0) {
        const uint8_t *wg = w + (r >> 1) * k + c0;
        const int shift = (r & 1) ? 4 : 0;
        for (int64_t c = 0; c < n; c += 16) {
            const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wg + c)));
            const __m512i idx = _mm512_and_si512(_mm512_srli_epi32(b, shift), low4);
            put16(y, y0 + c, _mm512_permutexvar_ps(idx, tv), ob);
        }
    } else {
        const uint8_t *wg = w + r * (k >> 1) + (c0 >> 1);
        for (int64_t c = 0; c < n; c += 16) {
            const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(wg + c / 2)));  // 8 bytes, 16-bit lanes
            const __m128i codes = _mm_or_si128(_mm_and_si128(b, _mm_set1_epi16(15)), _mm_slli_epi16(_mm_srli_epi16(b, 4), 8));
            put16(y, y0 + c, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), tv), ob);  // low nibble first
        }
    }
}
#endif

// y (rows, k) from 4-bit codes: value = codebook[code] * s with s the (row, input group)'s scale,
// then optionally fp8_round (fq: {mult, inv}, else NULL) and bfloat16 rounding (bf16). y: float32,
// or bfloat16 (out_bf16, with bf16). Scales: float32 (rows, k / group) in `scales`, or, where
// `scale_codes` is not NULL, bytes (rows, k / group) decoded as scale_lut[byte] * scale_mul. Layouts of w:
//   0: (rows / 2, k) bytes, row 2i in the low nibble (TensorRT-LLM's packed int4; rows even)
//   1: (rows, k / 2) bytes, input 2j in the low nibble (packed E2M1)
static inline __attribute__((always_inline)) void nibble_row(const uint8_t *w, int64_t layout, int64_t r, int64_t k,
                                                             const float *codebook, const float *scales,
                                                             const uint8_t *scale_codes, const float *scale_lut,
                                                             float scale_mul, int64_t group, const float *fq,
                                                             int bf16, void *y, int ob) {
    const int64_t groups = k / group;
    for (int64_t g = 0; g < groups; g++) {
        const int64_t i = r * groups + g;
        const float s = scale_codes ? scale_lut[scale_codes[i]] * scale_mul : scales[i];
        float table[16];  // this group's value of each code
        for (int c = 0; c < 16; c++) {
            float v = codebook[c] * s;
            if (fq) v = fp8_round(v, fq[0], fq[1]);
            table[c] = bf16 ? round_bf16(v) : v;
        }
        const int64_t y0 = r * k + g * group;
#ifdef __AVX512F__
        if (group % 16 == 0) {  // 16 codes a vector, looked up in the table's one register
            nibbles16(w, layout, r, k, g * group, group, table, y, y0, ob);
            continue;
        }
#endif
        if (layout == 0) {
            const uint8_t *wg = w + (r >> 1) * k + g * group;
            const int shift = (r & 1) ? 4 : 0;
            for (int64_t c = 0; c < group; c++) put(y, y0 + c, table[(wg[c] >> shift) & 15], ob);
        } else {
            const uint8_t *wg = w + r * (k >> 1) + ((g * group) >> 1);
            for (int64_t j = 0; j < group / 2; j++) {
                put(y, y0 + 2 * j, table[wg[j] & 15], ob);
                put(y, y0 + 2 * j + 1, table[wg[j] >> 4], ob);
            }
        }
    }
}

int trtserve_widen_nibbles(const uint8_t *w, int64_t layout, int64_t rows, int64_t k, const float *codebook,
                           const float *scales, const uint8_t *scale_codes, const float *scale_lut, float scale_mul,
                           int64_t group, const float *fq, int bf16, int out_bf16, void *y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        if (out_bf16)
            nibble_row(w, layout, r, k, codebook, scales, scale_codes, scale_lut, scale_mul, group, fq, 1, y, 1);
        else
            nibble_row(w, layout, r, k, codebook, scales, scale_codes, scale_lut, scale_mul, group, fq, bf16, y, 0);
    }
    return 0;
}

// One input c's values of outputs o0 .. o1 (inside one block of the pack) into the k-major slab:
// y[c * ld + o - row0] = (q - 8) * s[o].
static inline __attribute__((always_inline)) void int4pack_span(const uint8_t *wb, int shift, const float *s, int64_t o0,
                                                                int64_t o1, void *y, int64_t yi, int ob) {
    for (int64_t o = o0; o < o1; o++) put(y, yi + o, (float)(((wb[o - o0] >> shift) & 15) - 8) * s[o], ob);
}

// The slab of output rows row0 .. row0 + rows of torch's CPU int4 pack of an (n, k) weight (layouts as
// in int4_gemm.c), k-major: y[c * ld + r] = (q - 8) * scale of output row0 + r at input c (a (k, ld)
// array, of which the first `rows` columns are written; the GEMM reads it as the transposed weight).
// w [n / bn][k][bn / 2] bytes, byte j of row c of block b holding output bn * b + j (low nibble) and
// bn * b + j + bn / 2 (high); scales [k / gs][n] float32 (zeros 0: symmetric int4). y: float32, or
// bfloat16 bits (out_bf16) rounded as torch's .to(torch.bfloat16).
int trtserve_widen_int4pack(const uint8_t *w, int64_t n, int64_t k, int64_t bn, int64_t row0, int64_t rows,
                            const float *scales, int64_t gs, int64_t ld, int64_t out_bf16, void *y, int threads) {
    const int64_t half = bn / 2, end = row0 + rows;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < k; c++) {
        const float *s = scales + (c / gs) * n;
        const int64_t yi = c * ld - row0;
        for (int64_t b = row0 / bn; b * bn < end; b++) {
            const uint8_t *wb = w + (b * k + c) * half;
            for (int hi = 0; hi < 2; hi++) { /* the low nibbles' outputs, then the high ones' */
                const int64_t o0 = b * bn + hi * half, o1 = o0 + half, a = o0 > row0 ? o0 : row0, z = o1 < end ? o1 : end;
                if (a >= z) continue;
                if (out_bf16) int4pack_span(wb + a - o0, 4 * hi, s, a, z, y, yi, 1);
                else int4pack_span(wb + a - o0, 4 * hi, s, a, z, y, yi, 0);
            }
        }
    }
    return 0;
}
