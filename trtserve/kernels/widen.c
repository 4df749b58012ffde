// Widening of e4m3 and 4-bit weights to float32, a slab of output rows at a time, for the quantized
// linears' prefill GEMM (trtserve/models/quantized.py), and the e4m3 rounding of their activations.
// Built by trtserve/kernels/native.py; trtserve/kernels/widen.py holds the torch equivalents.
//
// Every value is the one torch's elementwise ops give for the same formula: each product is one
// float32 rounding (no contraction, see native.FLAGS), e4m3 and bfloat16 rounding are c10's
// (round to nearest even), and decoding tables (byte -> value) are handed in, computed by torch.

#include <stdint.h>
#include <string.h>

static inline float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// float32 -> bfloat16 -> float32 as c10::BFloat16 rounds (nearest even; NaN stays NaN).
static inline float round_bf16(float f) {
    if (f != f) return f;
    uint32_t u = to_bits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return from_bits(u & 0xFFFF0000u);
}

// float32 -> e4m3fn byte, c10's fp8e4m3fn_from_fp32_value: |f| >= 480 (and NaN) -> NaN; below 2^-6
// (e4m3's subnormals) by adding 2^14, whose float32 ulp is their step 2^-9 (the add rounds to nearest
// even); normals by a biased add on the bits.
static inline uint8_t e4m3_byte(float f) {
    uint32_t u = to_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint8_t r;
    if (u >= (1087u << 20)) {
        r = 0x7F;
    } else if (u < (121u << 23)) {
        u = to_bits(from_bits(u) + from_bits(141u << 23));
        r = (uint8_t)(u - (141u << 23));
    } else {
        const uint32_t odd = (u >> 20) & 1u;
        u += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu;
        u += odd;
        r = (uint8_t)(u >> 20);
    }
    return r | (uint8_t)(sign >> 24);
}

// e4m3(clamp(v * mult, +-448)) * inv: ModelOpt's fake quantization as _fp8_fake_quant computes it.
static inline float fp8_round(float v, float mult, float inv, const float *e4m3) {
    v = v * mult;
    v = v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v);  // NaN passes, as torch.clamp's does
    return e4m3[e4m3_byte(v)] * inv;
}

// max |x| over a row; NaN if any is (as torch's amax)
static inline float row_amax(const float *x, int64_t k) {
    float m = 0.0f;
    for (int64_t c = 0; c < k; c++) {
        const float a = x[c] < 0 ? -x[c] : x[c];
        m = (a > m || a != a) ? a : m;
    }
    return m;
}

// y (rows, k) = fp8_round(x) with row r's (mult, inv) at index r (per_row) or 0; mult NULL: per
// token, from the row's amax as Fp8Linear computes it in torch (scale = max(amax, 2^-24) / 448,
// mult = 448 / (scale * 448), inv = 1 / mult, each a float32 op). bf16: then rounded to bfloat16 (kept in float32).
int trtserve_fp8_round(const float *x, int64_t rows, int64_t k, const float *mult, const float *inv, int64_t per_row,
                       const float *e4m3, int bf16, float *y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * k;
        float m, iv;
        if (mult) {
            m = mult[per_row ? r : 0], iv = inv[per_row ? r : 0];
        } else {
            float amax = row_amax(xr, k);
            amax = amax < 0x1p-24f ? 0x1p-24f : amax;
            m = (1.0f / ((amax / 448.0f) * 448.0f)) * 448.0f;  // torch's 448 / t is reciprocal(t) * 448
            iv = 1.0f / m;
        }
        float *yr = y + r * k;
        for (int64_t c = 0; c < k; c++) {
            const float v = fp8_round(xr[c], m, iv, e4m3);
            yr[c] = bf16 ? round_bf16(v) : v;
        }
    }
    return 0;
}

// W8A8 SmoothQuant's per-token int8 rounding, as Int8SmoothQuant computes it in torch: scale[r] =
// max(amax, 1e-8) / 127, q = clamp(rint(x / scale), +-127) (nearest even), held in float32.
int trtserve_int8_round(const float *x, int64_t rows, int64_t k, float *q, float *scale, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * k;
        float amax = row_amax(xr, k);
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

// y (rows, n) *= row[r] * col[j]: the per-token times per-channel scales of an int8 GEMM.
int trtserve_scale_outer(float *y, int64_t rows, int64_t n, const float *row, const float *col, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * n;
        for (int64_t j = 0; j < n; j++) yr[j] = yr[j] * (row[r] * col[j]);
    }
    return 0;
}

// y (rows, k) = lut[w] for a (rows, k) slab of byte codes (e4m3, ...).
int trtserve_widen_bytes(const uint8_t *w, int64_t rows, int64_t k, const float *lut, float *y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *wr = w + r * k;
        float *yr = y + r * k;
        for (int64_t c = 0; c < k; c++) yr[c] = lut[wr[c]];
    }
    return 0;
}

// y (rows, k) from 4-bit codes: value = codebook[code] * s with s the (row, input group)'s scale,
// then optionally fp8_round (fq: {mult, inv}, else NULL) and bfloat16 rounding. Scales: float32
// (rows, k / group) in `scales`, or, where `scale_codes` is not NULL, bytes (rows, k / group)
// decoded as scale_lut[byte] * scale_mul. Layouts of w:
//   0: (rows / 2, k) bytes, row 2i in the low nibble (TensorRT-LLM's packed int4; rows even)
//   1: (rows, k / 2) bytes, input 2j in the low nibble (packed E2M1)
int trtserve_widen_nibbles(const uint8_t *w, int64_t layout, int64_t rows, int64_t k, const float *codebook,
                           const float *scales, const uint8_t *scale_codes, const float *scale_lut, float scale_mul,
                           int64_t group, const float *fq, const float *e4m3, int bf16, float *y, int threads) {
    const int64_t groups = k / group;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * k;
        for (int64_t g = 0; g < groups; g++) {
            const int64_t i = r * groups + g;
            const float s = scale_codes ? scale_lut[scale_codes[i]] * scale_mul : scales[i];
            float table[16];  // this group's value of each code
            for (int c = 0; c < 16; c++) {
                float v = codebook[c] * s;
                if (fq) v = fp8_round(v, fq[0], fq[1], e4m3);
                table[c] = bf16 ? round_bf16(v) : v;
            }
            float *yg = yr + g * group;
            if (layout == 0) {
                const uint8_t *wg = w + (r >> 1) * k + g * group;
                const int shift = (r & 1) ? 4 : 0;
                for (int64_t c = 0; c < group; c++) yg[c] = table[(wg[c] >> shift) & 15];
            } else {
                const uint8_t *wg = w + r * (k >> 1) + ((g * group) >> 1);
                for (int64_t j = 0; j < group / 2; j++) {
                    yg[2 * j] = table[wg[j] & 15];
                    yg[2 * j + 1] = table[wg[j] >> 4];
                }
            }
        }
    }
    return 0;
}

// y (rows, k) = (q - 8) * scale for output rows row0 .. row0 + rows of torch's CPU int4 pack of an
// (n, k) weight (layouts as in int4_gemm.c): w [n / bn][k][bn / 2] bytes, byte j of row c of block b
// holding output bn * b + j (low nibble) and bn * b + j + bn / 2 (high); sz [k / gs][n][2] float32
// scale and zero (zero 0: symmetric int4).
int trtserve_widen_int4pack(const uint8_t *w, int64_t n, int64_t k, int64_t bn, int64_t row0, int64_t rows,
                            const float *sz, int64_t gs, float *y, int threads) {
    const int64_t half = bn / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o = row0 + r, j = o % bn;
        const int shift = j < half ? 0 : 4;
        const uint8_t *wb = w + (o / bn) * k * half + j % half;
        float *yr = y + r * k;
        for (int64_t g = 0; g < k / gs; g++) {
            const float s = sz[(g * n + o) * 2];
            for (int64_t c = g * gs; c < (g + 1) * gs; c++) yr[c] = (float)(((wb[c * half] >> shift) & 15) - 8) * s;
        }
    }
    return 0;
}
