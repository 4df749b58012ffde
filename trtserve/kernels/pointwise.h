/* The decoder's per-token glue, one row or head at a time, shared by pointwise.c (one op a call)
 * and decode_layers.c (every layer of a decode step in one call). Every function rounds where
 * torch rounds the op it stands in for: to the model dtype `dt` after each op; the source and
 * destination buffers may be in another dtype (decode_layers.c keeps its scratch in float32,
 * holding values already rounded to dt). */
#ifndef TRTSERVE_POINTWISE_H
#define TRTSERVE_POINTWISE_H
#include <math.h>

#include "dtypes.h"

/* h[row] = h[row] + delta[row] (when delta is given), then out[row] = w * (h * rsqrt(mean(h^2) + eps)),
 * float32 statistics as HF's RMSNorm; with an offset, Gemma's (h * rsqrt(...)) * (offset + w) in float32,
 * rounded once. h in hdt, delta in ddt, w in dt, out in odt. */
static inline __attribute__((always_inline)) void norm_row(void* h, int hdt, const void* delta, int ddt, int64_t row,
                                                          int64_t H, const void* w, int dt, float eps, float offset,
                                                          void* out, int odt) {
    const int64_t h8 = H & ~(int64_t)7;
    __m256 ss8 = _mm256_setzero_ps(); /* 8 lane sums of squares, then the tail: one fixed order a row */
    for (int64_t i = 0; i < h8; i += 8) {
        __m256 x = load8(h, hdt, row + i);
        if (delta) {
            x = rnd8(_mm256_add_ps(x, load8(delta, ddt, row + i)), dt);
            store8(h, hdt, row + i, x);
        }
        ss8 = _mm256_add_ps(ss8, _mm256_mul_ps(x, x));
    }
    float ss = hsum(ss8);
    for (int64_t i = h8; i < H; i++) {
        float x = load1(h, hdt, row + i);
        if (delta) {
            x = rnd(x + load1(delta, ddt, row + i), dt);
            store1(h, hdt, row + i, x);
        }
        ss += x * x;
    }
    const float r = 1.0f / sqrtf(ss / (float)H + eps);
    const __m256 r8 = _mm256_set1_ps(r), o8 = _mm256_set1_ps(offset);
    if (offset != 0.0f) {
        for (int64_t i = 0; i < h8; i += 8)
            store8(out, odt, row + i,
                   rnd8(_mm256_mul_ps(_mm256_mul_ps(load8(h, hdt, row + i), r8), _mm256_add_ps(o8, load8(w, dt, i))), dt));
        for (int64_t i = h8; i < H; i++)
            store1(out, odt, row + i, rnd(load1(h, hdt, row + i) * r * (offset + load1(w, dt, i)), dt));
    } else {
        for (int64_t i = 0; i < h8; i += 8)
            store8(out, odt, row + i, rnd8(_mm256_mul_ps(load8(w, dt, i), rnd8(_mm256_mul_ps(load8(h, hdt, row + i), r8), dt)), dt));
        for (int64_t i = h8; i < H; i++)
            store1(out, odt, row + i, rnd(load1(w, dt, i) * rnd(load1(h, hdt, row + i) * r, dt), dt));
    }
}

/* Whether q/k norm widths are per head (hd) or over all of q's (k's) heads (QK_NORM, QK_NORM_WIDE). */
static inline int qk_norm_ok(const void* q_norm, const void* k_norm, int64_t qn, int64_t kn, int64_t n_h,
                             int64_t n_kv, int64_t hd) {
    return q_norm && k_norm && (qn == hd || qn == n_h * hd) && (kn == hd || kn == n_kv * hd);
}

/* RMSNorm in place of chunk c of a row's q and k (qkv at row0, in sdt): q's n_h hd / qn chunks of qn values
 * by q_norm, then k's of kn by k_norm (weights in dt), before RoPE as HF's q_norm / k_norm. */
static inline __attribute__((always_inline)) void qk_norm_chunk(void* qkv, int sdt, int64_t row0, int64_t c,
                                                               int64_t n_h, int64_t hd, const void* q_norm,
                                                               const void* k_norm, int64_t qn, int64_t kn, int dt,
                                                               float eps, float offset) {
    const int64_t nq = n_h * hd / qn;
    if (c < nq)
        norm_row(qkv, sdt, NULL, sdt, row0 + c * qn, qn, q_norm, dt, eps, offset, qkv, sdt);
    else
        norm_row(qkv, sdt, NULL, sdt, row0 + n_h * hd + (c - nq) * kn, kn, k_norm, dt, eps, offset, qkv, sdt);
}

/* dst[d0, d0 + n) (ddt) = src[s0, s0 + n) (sdt), each value as store1 stores it. */
static inline __attribute__((always_inline)) void copy_row(const void* src, int sdt, int64_t s0, void* dst, int ddt,
                                                          int64_t d0, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store8(dst, ddt, d0 + i, load8(src, sdt, s0 + i));
    for (; i < n; i++) store1(dst, ddt, d0 + i, load1(src, sdt, s0 + i));
}

/* One head of hd values at src (sdt) written at dst (ddt), its first rot rotated NeoX-style at table row
 * `tab` (cos and signed sin [rot] in dt: x * cos + roll(x, rot/2) * signed_sin), the rest as they are (HF's
 * partial rotary; rot 0: a layer without RoPE). */
static inline __attribute__((always_inline)) void rope_head(const void* src, int sdt, int64_t s0, void* dst, int ddt,
                                                           int64_t d0, const void* cos, const void* sin,
                                                           int64_t tab, int64_t hd, int64_t rot, int dt) {
    const int64_t half = rot / 2;
    int64_t i = 0;
    if (half % 8 == 0) /* 8 lanes within each half, so the rolled values are 8 adjacent ones too */
        for (; i < rot; i += 8) {
            const int64_t r = i < half ? i + half : i - half;
            const __m256 a = rnd8(_mm256_mul_ps(load8(src, sdt, s0 + i), load8(cos, dt, tab + i)), dt);
            const __m256 b = rnd8(_mm256_mul_ps(load8(src, sdt, s0 + r), load8(sin, dt, tab + i)), dt);
            store8(dst, ddt, d0 + i, rnd8(_mm256_add_ps(a, b), dt));
        }
    for (; i < rot; i++) {
        const float x = load1(src, sdt, s0 + i), rolled = load1(src, sdt, s0 + (i + half) % rot);
        const float a = rnd(x * load1(cos, dt, tab + i), dt), b = rnd(rolled * load1(sin, dt, tab + i), dt);
        store1(dst, ddt, d0 + i, rnd(a + b, dt));
    }
    copy_row(src, sdt, s0 + rot, dst, ddt, d0 + rot, hd - rot);
}

/* silu(fc) * gate on 8 lanes, silu = fc / (1 + exp(-fc)) rounded to dt before the product (as F.silu(fc) *
 * gate); exp by exp8 (within 1 ulp of expf), as glibc's scalar expf was a visible share of a decode step. */
static inline __attribute__((always_inline)) __m256 silu_mul8(__m256 fc, __m256 gate, int dt) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), fc));
    return rnd8(_mm256_mul_ps(rnd8(_mm256_div_ps(fc, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), dt), gate), dt);
}

enum { SILU = 0, GELU_TANH = 1 }; /* the gated MLP's activations: act_mul_row's `act` */

/* gelu_tanh(fc) * gate on 8 lanes, the GeLU as torch's tanh form computes it in float32 (0.5 x (1 + tanh(
 * sqrt(2 / pi) (x + 0.044715 x^3)))) rounded to dt before the product (as F.gelu(fc, approximate="tanh") * gate). */
static inline __attribute__((always_inline)) __m256 gelu_tanh_mul8(__m256 x, __m256 gate, int dt) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 inner =
        _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
    const __m256 g = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh8(inner)));
    return rnd8(_mm256_mul_ps(rnd8(g, dt), gate), dt);
}

/* out[o0 + i] = act(fg[fc0 + i]) * fg[g0 + i] for i < n; fg in sdt, out in odt (values rounded to dt).
 * Eight at a time and the rest one by one, each through the 8-lane form, so every element gets the same bits. */
static inline __attribute__((always_inline)) void act_mul_row(const void* fg, int sdt, int64_t fc0, int64_t g0,
                                                             void* out, int odt, int64_t o0, int64_t n, int act,
                                                             int dt) {
    float v[8];
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t k = n - i < 8 ? n - i : 8;
        __m256 f, g;
        if (k == 8) {
            f = load8(fg, sdt, fc0 + i), g = load8(fg, sdt, g0 + i);
        } else {
            float a[8] = {0}, b[8] = {0};
            for (int64_t j = 0; j < k; j++) a[j] = load1(fg, sdt, fc0 + i + j), b[j] = load1(fg, sdt, g0 + i + j);
            f = _mm256_loadu_ps(a), g = _mm256_loadu_ps(b);
        }
        const __m256 y = act == GELU_TANH ? gelu_tanh_mul8(f, g, dt) : silu_mul8(f, g, dt);
        if (k == 8) {
            store8(out, odt, o0 + i, y);
        } else {
            _mm256_storeu_ps(v, y);
            for (int64_t j = 0; j < k; j++) store1(out, odt, o0 + i + j, v[j]);
        }
    }
}

/* act_mul_row with SiLU (the experts' MLPs, experts.h). */
static inline __attribute__((always_inline)) void silu_mul_row(const void* fg, int sdt, int64_t fc0, int64_t g0,
                                                              void* out, int odt, int64_t o0, int64_t n, int dt) {
    act_mul_row(fg, sdt, fc0, g0, out, odt, o0, n, SILU, dt);
}

#endif
