// Decoding attention against bf16 rings (kernels/decode.h): scores = K q, softmax, out = V^T p, each stored bf16
// value widened to fp32 in registers (a 16-bit shift; exact). Decoding at long context is bound by the bytes it
// reads, which bf16 halves; the vector paths keep the arithmetic under that bound: scores of 8 (AVX2) or 16
// (AVX-512) rows at a time with one transposing reduction, and the weighted sum of V in registers. Head dims 32, 64
// and 128 take them, others (and builds without AVX2) the portable loops. Single-threaded: the decoder runs heads in
// parallel.
#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/vexp.h"
#include "kernels/decode.h"

namespace aah::bf16 {

namespace {

inline float widen(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

// Portable: scores[j] = scale * q . k[j] for n rows of the ring from row `first`.
void ring_scores(float* scores, const float* q, const uint16_t* k, int first, int n, int D, float scale) {
  for (int j = 0; j < n; j++) {
    const uint16_t* row = k + int64_t(first + j) * D;
    float s = 0;
    for (int d = 0; d < D; d++) s += q[d] * widen(row[d]);
    scores[j] = s * scale;
  }
}

// Portable: out += sum_j p[j] v[j] over n rows of the ring from row `first`.
void ring_weighted_sum(float* out, const float* p, const uint16_t* v, int first, int n, int D) {
  for (int j = 0; j < n; j++) {
    const uint16_t* row = v + int64_t(first + j) * D;
    for (int d = 0; d < D; d++) out[d] += p[j] * widen(row[d]);
  }
}

#ifdef AAH_AVX2
// 8 bf16 values -> 8 floats.
inline __m256 widen8(const uint16_t* p) {
  const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

// The lane sums of a[0..7] as one vector (lane r: the sum of a[r]'s lanes).
inline __m256 lane_sums8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// NC = D / 8 chunks of a row.
template <int NC>
void ring_scores8(float* scores, const float* q, const uint16_t* k, int first, int n, float scale) {
  constexpr int D = 8 * NC;
  __m256 qv[NC];
  for (int c = 0; c < NC; c++) qv[c] = _mm256_loadu_ps(q + 8 * c);
  const __m256 sv = _mm256_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 acc[8];
    for (int r = 0; r < 8; r++) {
      const uint16_t* row = k + int64_t(first + j + r) * D;
      acc[r] = _mm256_mul_ps(qv[0], widen8(row));
      for (int c = 1; c < NC; c++) acc[r] = _mm256_fmadd_ps(qv[c], widen8(row + 8 * c), acc[r]);
    }
    _mm256_storeu_ps(scores + j, _mm256_mul_ps(lane_sums8(acc), sv));
  }
  ring_scores(scores + j, q, k, first + j, n - j, D, scale);
}

template <int NC>
void ring_weighted_sum8(float* out, const float* p, const uint16_t* v, int first, int n) {
  constexpr int D = 8 * NC;
  __m256 acc0[NC], acc1[NC];  // even and odd rows: two independent chains
  for (int c = 0; c < NC; c++) acc0[c] = _mm256_setzero_ps(), acc1[c] = _mm256_setzero_ps();
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    const uint16_t *r0 = v + int64_t(first + j) * D, *r1 = r0 + D;
    const __m256 p0 = _mm256_set1_ps(p[j]), p1 = _mm256_set1_ps(p[j + 1]);
    for (int c = 0; c < NC; c++) {
      acc0[c] = _mm256_fmadd_ps(p0, widen8(r0 + 8 * c), acc0[c]);
      acc1[c] = _mm256_fmadd_ps(p1, widen8(r1 + 8 * c), acc1[c]);
    }
  }
  if (j < n) {
    const uint16_t* r0 = v + int64_t(first + j) * D;
    const __m256 p0 = _mm256_set1_ps(p[j]);
    for (int c = 0; c < NC; c++) acc0[c] = _mm256_fmadd_ps(p0, widen8(r0 + 8 * c), acc0[c]);
  }
  for (int c = 0; c < NC; c++)
    _mm256_storeu_ps(out + 8 * c, _mm256_add_ps(_mm256_loadu_ps(out + 8 * c), _mm256_add_ps(acc0[c], acc1[c])));
}
#endif

#ifdef AAH_AVX512
// AVX-512: one 64-byte load holds 32 stored values; as 32-bit lanes, its even values are the low halves (shifted up
// 16 bits: fp32) and its odd values the high halves (masked: fp32). q and the weighted sum are kept split the same
// way (even and odd dimensions), so a row costs a load, two integer ops and two FMAs per 32 dimensions.
AAH_AVX512_WARNINGS_OFF
inline __m512 evens(__m512i x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}
inline __m512 odds(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xffff0000u))));
}
inline __m256 upper_half(__m512 x) {  // AVX-512F alone (_mm512_extractf32x8_ps needs DQ)
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}
inline __m512i load32(const uint16_t* p) {
  return _mm512_loadu_si512(p);
}

// Row r of 16 (at rows + r ld) dotted with x, whose even and odd values are xe[c], xo[c] for its nc chunks of 32;
// out[r] = scale * the sum (each row folded to 8 lanes, then two transposing reductions).
__attribute__((always_inline)) inline void dot16_rows(float* out, const __m512* xe, const __m512* xo, int nc,
                                                      const uint16_t* rows, int64_t ld, float scale) {
  __m256 half[16];
  for (int r = 0; r < 16; r++) {
    const uint16_t* row = rows + r * ld;
    __m512i x = load32(row);
    __m512 acc = _mm512_fmadd_ps(xo[0], odds(x), _mm512_mul_ps(xe[0], evens(x)));
    for (int c = 1; c < nc; c++) {
      x = load32(row + 32 * c);
      acc = _mm512_fmadd_ps(xo[c], odds(x), _mm512_fmadd_ps(xe[c], evens(x), acc));
    }
    half[r] = _mm256_add_ps(_mm512_castps512_ps256(acc), upper_half(acc));
  }
  const __m256 sv = _mm256_set1_ps(scale);
  _mm256_storeu_ps(out, _mm256_mul_ps(lane_sums8(half), sv));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(lane_sums8(half + 8), sv));
}
// xe[c], xo[c] = the even and odd values of x's chunk c (32 values) for nc chunks.
inline void split_even_odd(__m512* xe, __m512* xo, const float* x, int nc) {
  alignas(64) float e[16], o[16];
  for (int c = 0; c < nc; c++) {
    for (int i = 0; i < 16; i++) e[i] = x[32 * c + 2 * i], o[i] = x[32 * c + 2 * i + 1];
    xe[c] = _mm512_load_ps(e), xo[c] = _mm512_load_ps(o);
  }
}

// NC = D / 32 chunks of a row.
template <int NC>
void ring_scores16(float* scores, const float* q, const uint16_t* k, int first, int n, float scale) {
  constexpr int D = 32 * NC;
  __m512 qe[NC], qo[NC];
  split_even_odd(qe, qo, q, NC);
  int j = 0;
  for (; j + 16 <= n; j += 16) dot16_rows(scores + j, qe, qo, NC, k + int64_t(first + j) * D, D, scale);
  ring_scores(scores + j, q, k, first + j, n - j, D, scale);
}

template <int NC>
void ring_weighted_sum16(float* out, const float* p, const uint16_t* v, int first, int n) {
  constexpr int D = 32 * NC;
  __m512 e0[NC], o0[NC], e1[NC], o1[NC];  // even and odd dimensions of even and odd rows: independent chains
  for (int c = 0; c < NC; c++)
    e0[c] = _mm512_setzero_ps(), o0[c] = _mm512_setzero_ps(), e1[c] = _mm512_setzero_ps(), o1[c] = _mm512_setzero_ps();
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    const uint16_t *r0 = v + int64_t(first + j) * D, *r1 = r0 + D;
    const __m512 p0 = _mm512_set1_ps(p[j]), p1 = _mm512_set1_ps(p[j + 1]);
    for (int c = 0; c < NC; c++) {
      const __m512i x0 = load32(r0 + 32 * c), x1 = load32(r1 + 32 * c);
      e0[c] = _mm512_fmadd_ps(p0, evens(x0), e0[c]), o0[c] = _mm512_fmadd_ps(p0, odds(x0), o0[c]);
      e1[c] = _mm512_fmadd_ps(p1, evens(x1), e1[c]), o1[c] = _mm512_fmadd_ps(p1, odds(x1), o1[c]);
    }
  }
  if (j < n) {
    const uint16_t* r0 = v + int64_t(first + j) * D;
    const __m512 p0 = _mm512_set1_ps(p[j]);
    for (int c = 0; c < NC; c++) {
      const __m512i x0 = load32(r0 + 32 * c);
      e0[c] = _mm512_fmadd_ps(p0, evens(x0), e0[c]), o0[c] = _mm512_fmadd_ps(p0, odds(x0), o0[c]);
    }
  }
  alignas(64) float es[16], os[16];
  for (int c = 0; c < NC; c++) {
    _mm512_store_ps(es, _mm512_add_ps(e0[c], e1[c]));
    _mm512_store_ps(os, _mm512_add_ps(o0[c], o1[c]));
    for (int i = 0; i < 16; i++) out[32 * c + 2 * i] += es[i], out[32 * c + 2 * i + 1] += os[i];
  }
}
// matvec (below) for rows of 32 nc values, nc <= kMatvecChunks (x kept split in registers and L1).
constexpr int kMatvecChunks = 64;
void matvec16(float* out, const float* x, const uint16_t* w, int rows, int nc) {
  const int blocks = rows / 16;
#pragma omp parallel if (int64_t(rows) * nc >= (1 << 13))
  {
    __m512 xe[kMatvecChunks], xo[kMatvecChunks];
    split_even_odd(xe, xo, x, nc);
#pragma omp for schedule(static)
    for (int b = 0; b < blocks; b++) dot16_rows(out + 16 * b, xe, xo, nc, w + int64_t(16 * b) * 32 * nc, 32 * nc, 1.0f);
  }
  ring_scores(out + 16 * blocks, x, w, 16 * blocks, rows - 16 * blocks, 32 * nc, 1.0f);
}
AAH_AVX512_WARNINGS_ON
#endif

void scores_of(float* scores, const float* q, const uint16_t* k, int first, int n, int D, float scale) {
#ifdef AAH_AVX512
  if (D == 32) return ring_scores16<1>(scores, q, k, first, n, scale);
  if (D == 64) return ring_scores16<2>(scores, q, k, first, n, scale);
  if (D == 128) return ring_scores16<4>(scores, q, k, first, n, scale);
#elif defined(AAH_AVX2)
  if (D == 32) return ring_scores8<4>(scores, q, k, first, n, scale);
  if (D == 64) return ring_scores8<8>(scores, q, k, first, n, scale);
  if (D == 128) return ring_scores8<16>(scores, q, k, first, n, scale);
#endif
  ring_scores(scores, q, k, first, n, D, scale);
}

void weighted_sum_of(float* out, const float* p, const uint16_t* v, int first, int n, int D) {
#ifdef AAH_AVX512
  if (D == 32) return ring_weighted_sum16<1>(out, p, v, first, n);
  if (D == 64) return ring_weighted_sum16<2>(out, p, v, first, n);
  if (D == 128) return ring_weighted_sum16<4>(out, p, v, first, n);
#elif defined(AAH_AVX2)
  if (D == 32) return ring_weighted_sum8<4>(out, p, v, first, n);
  if (D == 64) return ring_weighted_sum8<8>(out, p, v, first, n);
  if (D == 128) return ring_weighted_sum8<16>(out, p, v, first, n);
#endif
  ring_weighted_sum(out, p, v, first, n, D);
}

}  // namespace

void attn_decode_forward(float* out, const float* q, const uint16_t* k, const uint16_t* v, int cap, int start, int n,
                         int D, float* scores) {
  const float scale = 1.0f / std::sqrt(float(D));
  const int n1 = std::min(n, cap - start), n2 = n - n1;  // before and after the ring's wrap
  scores_of(scores, q, k, start, n1, D, scale);
  scores_of(scores + n1, q, k, 0, n2, D, scale);
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) mx = std::max(mx, scores[j]);
  const float inv = 1.0f / cpu::vexp_shifted_sum(scores, scores, mx, n);
  for (int j = 0; j < n; j++) scores[j] *= inv;
  std::fill(out, out + D, 0.0f);
  weighted_sum_of(out, scores, v, start, n1, D);
  weighted_sum_of(out, scores + n1, v, 0, n2, D);
}

void matvec(float* out, const float* x, const uint16_t* w, int rows, int len) {
#ifdef AAH_AVX512
  if (len % 32 == 0 && len / 32 <= kMatvecChunks) return matvec16(out, x, w, rows, len / 32);
#endif
  ring_scores(out, x, w, 0, rows, len, 1.0f);
}

}  // namespace aah::bf16
