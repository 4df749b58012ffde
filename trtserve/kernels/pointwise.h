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
 * float32 statistics as HF's RMSNorm. h in hdt, delta in ddt, w in dt, out in odt. */
static inline __attribute__((always_inline)) void norm_row(void* h, int hdt, const void* delta, int ddt, int64_t row,
                                                          int64_t H, const void* w, int dt, float eps, void* out,
                                                          int odt) {
    float ss = 0;
    for (int64_t i = 0; i < H; i++) {
        float x = load1(h, hdt, row + i);
        if (delta) {
            x = rnd(x + load1(delta, ddt, row + i), dt);
            store1(h, hdt, row + i, x);
        }
        ss += x * x;
    }
    const float r = 1.0f / sqrtf(ss / (float)H + eps);
    for (int64_t i = 0; i < H; i++)
        store1(out, odt, row + i, rnd(load1(w, dt, i) * rnd(load1(h, hdt, row + i) * r, dt), dt));
}

/* One head of hd values at src (sdt) rotated NeoX-style at table row `tab` (cos and signed sin in
 * dt: x * cos + roll(x, hd/2) * signed_sin), written at dst (ddt). */
static inline __attribute__((always_inline)) void rope_head(const void* src, int sdt, int64_t s0, void* dst, int ddt,
                                                           int64_t d0, const void* cos, const void* sin,
                                                           int64_t tab, int64_t hd, int dt) {
    const int64_t half = hd / 2;
    for (int64_t i = 0; i < hd; i++) {
        const float x = load1(src, sdt, s0 + i), rolled = load1(src, sdt, s0 + (i + half) % hd);
        const float a = rnd(x * load1(cos, dt, tab + i), dt), b = rnd(rolled * load1(sin, dt, tab + i), dt);
        store1(dst, ddt, d0 + i, rnd(a + b, dt));
    }
}

/* silu(fc[i]) * gate[i], silu rounded to dt before the product (as F.silu(fc) * gate). */
static inline __attribute__((always_inline)) float silu_mul1(float fc, float gate, int dt) {
    return rnd(rnd(fc / (1.0f + expf(-fc)), dt) * gate, dt);
}

#endif
