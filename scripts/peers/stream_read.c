// A STREAM-like read: every thread sums its share of a float array with eight independent vector
// accumulators (16 lanes where the build has AVX-512), so the loads, not the adds, set the pace.
// The sum is written out so the compiler keeps the reads.
#include <immintrin.h>
#include <stdint.h>

#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define LOAD _mm512_loadu_ps
#define ADD _mm512_add_ps
#define ZERO _mm512_setzero_ps
#define HSUM _mm512_reduce_add_ps
#else
typedef __m256 vec;
#define LANES 8
#define LOAD _mm256_loadu_ps
#define ADD _mm256_add_ps
#define ZERO _mm256_setzero_ps
static float HSUM(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
#endif
#define STEP (8 * LANES)

int stream_read(const float *a, int64_t n, float *out) {  // n: a multiple of 4 * STEP
    // Each thread reads four far-apart streams side by side, as a GEMV reads several weight rows: one
    // stream alone leaves the hardware prefetchers short of the bandwidth on these CPUs.
    const int64_t quarter = n / 4;
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
        vec acc[8];
        for (int j = 0; j < 8; j++) acc[j] = ZERO();
#pragma omp for schedule(static)
        for (int64_t i = 0; i < quarter / (2 * LANES); i++) {
            const float *p = a + i * 2 * LANES;
            for (int s = 0; s < 4; s++) {
                acc[2 * s] = ADD(acc[2 * s], LOAD(p + s * quarter));
                acc[2 * s + 1] = ADD(acc[2 * s + 1], LOAD(p + s * quarter + LANES));
            }
        }
        for (int j = 1; j < 8; j++) acc[0] = ADD(acc[0], acc[j]);
        total += HSUM(acc[0]);
    }
    *out = total;
    return 0;
}
