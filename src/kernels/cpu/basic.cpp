// Fast kernels for everything but attention. Shape legend in kernels/ops.h.
// Threads: OpenMP with static schedules. Reductions over rows (parameter gradients) are split by channel, never
// by row, so every sum is taken in the same order whatever the thread count: results are bitwise reproducible.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah::cpu {

// Row-parallel kernels fork threads only for at least this many elements: a decoding step's single rows would
// pay a fork and a barrier (microseconds; far more when the cores are shared) for nanoseconds of work. Rows are
// independent, so results do not depend on it.
constexpr int64_t kParallelMin = 1 << 15;

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) std::memcpy(out + (int64_t)n * C, wte + (int64_t)tokens[n] * C, sizeof(float) * C);
}

// Each thread owns a block of channels and scans all rows in order: deterministic, no races.
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  constexpr int kBlock = 16;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int n = 0; n < N; n++) {
      float* d = dwte + (int64_t)tokens[n] * C;
      const float* g = dout + (int64_t)n * C;
      for (int c = c0; c < c1; c++) d[c] += g[c];
    }
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* xn = x + (int64_t)n * C;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += xn[c] * xn[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
    rstd[n] = r;
    float* on = out + (int64_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) on[c] = xn[c] * r * w[c];
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C) {
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const float* xn = x + (int64_t)n * C;
      const float* dn = dout + (int64_t)n * C;
      const float r = rstd[n];
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) dot += dn[c] * w[c] * xn[c];
      dot *= r / C;
      float* dxn = dx + (int64_t)n * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dxn[c] = r * (dn[c] * w[c] - xn[c] * r * dot);
    }
    // dw: each channel's sum over rows runs in row order, so the bits do not depend on the threads. Each thread
    // takes a range of channels (whole blocks of 16) and walks the rows once, reading its part of a row as one
    // stream (a block of 16 channels at a time read one cache line per row, 1 KB apart at C = 256: 10x slower).
    constexpr int kBlock = 16;
    const int nth = omp_get_num_threads(), nblocks = (C + kBlock - 1) / kBlock;
    const int per = (nblocks + nth - 1) / nth * kBlock, c0 = std::min(C, omp_get_thread_num() * per),
              c1 = std::min(C, c0 + per);
    thread_local std::vector<float> acc;
    acc.assign(c1 - c0, 0.0f);
    for (int n = 0; n < N && c0 < c1; n++) {
      const float* xn = x + (int64_t)n * C;
      const float* dn = dout + (int64_t)n * C;
      const float r = rstd[n];
      for (int c = c0; c < c1; c++) acc[c - c0] += dn[c] * xn[c] * r;
    }
    for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
  }
}

void matmul_forward(float* out, const float* inp, const float* w, int N, int C, int OC) {
  if (N == 1) {  // one row (decoding): sgemv reads w once; OpenBLAS's sgemm would pack all of w first
    gemv(false, OC, C, 1.0f, w, C, inp, 0.0f, out);
    return;
  }
  gemm(false, true, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C,
                     int OC) {
  if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
  gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
}

void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int T, int H, int Hkv, int D) {
  const int W = (H + 2 * Hkv) * D;
#pragma omp parallel for collapse(2) schedule(static) if (int64_t(B) * T * W >= kParallelMin)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float* row = qkv + ((int64_t)b * T + t) * W;
      for (int h = 0; h < H; h++) std::memcpy(q + (((int64_t)b * H + h) * T + t) * D, row + h * D, D * 4);
      for (int h = 0; h < Hkv; h++) {
        std::memcpy(k + (((int64_t)b * Hkv + h) * T + t) * D, row + (H + h) * D, D * 4);
        std::memcpy(v + (((int64_t)b * Hkv + h) * T + t) * D, row + (H + Hkv + h) * D, D * 4);
      }
    }
}

void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B, int T, int H,
                        int Hkv, int D) {
  const int W = (H + 2 * Hkv) * D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float* row = dqkv + ((int64_t)b * T + t) * W;
      for (int h = 0; h < H; h++) std::memcpy(row + h * D, dq + (((int64_t)b * H + h) * T + t) * D, D * 4);
      for (int h = 0; h < Hkv; h++) {
        std::memcpy(row + (H + h) * D, dk + (((int64_t)b * Hkv + h) * T + t) * D, D * 4);
        std::memcpy(row + (H + Hkv + h) * D, dv + (((int64_t)b * Hkv + h) * T + t) * D, D * 4);
      }
    }
}

void heads_merge_forward(float* out, const float* inp, int B, int H, int T, int D) {
#pragma omp parallel for collapse(2) schedule(static) if (int64_t(B) * T * H * D >= kParallelMin)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++)
        std::memcpy(out + (((int64_t)b * T + t) * H + h) * D, inp + (((int64_t)b * H + h) * T + t) * D, D * 4);
}

void heads_merge_backward(float* dinp, const float* dout, int B, int H, int T, int D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++)
        std::memcpy(dinp + (((int64_t)b * H + h) * T + t) * D, dout + (((int64_t)b * T + t) * H + h) * D, D * 4);
}

// sign = +1 rotates by the angle (forward), -1 by its negative (the transpose, for backward).
static void rope_rotate(float* x, const float* cos, const float* sin, int BH, int T, int D, float sign) {
  const int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if (int64_t(BH) * T * D >= kParallelMin)
  for (int bh = 0; bh < BH; bh++)
    for (int t = 0; t < T; t++) {
      float* r = x + ((int64_t)bh * T + t) * D;
      const float* c = cos + (int64_t)t * half;
      const float* s = sin + (int64_t)t * half;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float x1 = r[i], x2 = r[i + half], si = sign * s[i];
        r[i] = x1 * c[i] - x2 * si;
        r[i + half] = x2 * c[i] + x1 * si;
      }
    }
}

void rope_forward(float* x, const float* cos, const float* sin, int BH, int T, int D) {
  rope_rotate(x, cos, sin, BH, T, D, 1.0f);
}
void rope_backward(float* dx, const float* cos, const float* sin, int BH, int T, int D) {
  rope_rotate(dx, cos, sin, BH, T, D, -1.0f);
}

static inline float sigmoid(float g) { return 1.0f / (1.0f + vexp_scalar(-g)); }

void swiglu_forward(float* out, const float* h, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* g = h + (int64_t)n * 2 * F;
    const float* u = g + F;
    float* o = out + (int64_t)n * F;
    int f = 0;
#ifdef AAH_AVX2
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; f + 8 <= F; f += 8) {
      const __m256 gv = _mm256_loadu_ps(g + f);
      const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, vexp_vec<Vec8>(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
      _mm256_storeu_ps(o + f, _mm256_mul_ps(_mm256_mul_ps(gv, sig), _mm256_loadu_ps(u + f)));
    }
#endif
    for (; f < F; f++) o[f] = g[f] * sigmoid(g[f]) * u[f];
  }
}

void swiglu_backward(float* dh, const float* dout, const float* h, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = h + (int64_t)n * 2 * F;
    const float* u = g + F;
    const float* d = dout + (int64_t)n * F;
    float* dg = dh + (int64_t)n * 2 * F;
    float* du = dg + F;
    int f = 0;
#ifdef AAH_AVX2
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; f + 8 <= F; f += 8) {
      const __m256 gv = _mm256_loadu_ps(g + f), uv = _mm256_loadu_ps(u + f), dv = _mm256_loadu_ps(d + f);
      const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, vexp_vec<Vec8>(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
      // d silu(g) / dg = sig (1 + g (1 - sig))
      const __m256 dsilu = _mm256_mul_ps(sig, _mm256_fmadd_ps(gv, _mm256_sub_ps(one, sig), one));
      _mm256_storeu_ps(dg + f, _mm256_mul_ps(_mm256_mul_ps(dv, uv), dsilu));
      _mm256_storeu_ps(du + f, _mm256_mul_ps(dv, _mm256_mul_ps(gv, sig)));
    }
#endif
    for (; f < F; f++) {
      const float sig = sigmoid(g[f]);
      dg[f] = d[f] * u[f] * sig * (1.0f + g[f] * (1.0f - sig));
      du[f] = d[f] * g[f] * sig;
    }
  }
}

void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                   int N, int V, float dscale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* l = logits + (int64_t)n * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    const float target_logit = l[targets[n]];
    if (dlogits) {
      float* d = dlogits + (int64_t)n * V;
      const float sum = vexp_shifted_sum(d, l, mx, V);  // d holds exp(l - mx) for now
      losses[n] = mx + std::log(sum) - target_logit;
      const float scale = dscale / sum;
#pragma omp simd
      for (int i = 0; i < V; i++) d[i] *= scale;
      d[targets[n]] -= dscale;
    } else {
      thread_local std::vector<float> row;  // grown once per thread, reused
      if ((int)row.size() < V) row.resize(V);
      const float sum = vexp_shifted_sum(row.data(), l, mx, V);
      losses[n] = mx + std::log(sum) - target_logit;
    }
  }
}

// 8 running maxima, one per lane, so that the loop vectorizes; max is exact, so any order gives the same result.
float scale_max(float* e, int n, float scale) {
  float lane[8];
  for (float& l : lane) l = -INFINITY;
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; l++) {
      e[j + l] *= scale;
      lane[l] = std::max(lane[l], e[j + l]);
    }
  for (; j < n; j++) {
    e[j] *= scale;
    lane[0] = std::max(lane[0], e[j]);
  }
  float mx = lane[0];
  for (int l = 1; l < 8; l++) mx = std::max(mx, lane[l]);
  return mx;
}

// Plain pointers, so the loop vectorizes.
void residual_add(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

double sum_squares(const float* x, size_t n) {
  constexpr int kChunks = 64;  // fixed: the same partial sums whatever the thread count
  double partial[kChunks] = {};
  const size_t per = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; c++) {
    const size_t lo = std::min(n, c * per), hi = std::min(n, lo + per);
    double s = 0;
    for (size_t i = lo; i < hi; i++) s += double(x[i]) * x[i];
    partial[c] = s;
  }
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

void adamw_update(float* params, float* m, float* v, const uint8_t* decay, const float* grads, size_t n,
                  const AdamWStep& s) {
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, c1 = s.c1, c2 = s.c2, flr = s.lr, wd = s.weight_decay,
              grad_scale = s.grad_scale;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = grads[i] * grad_scale;
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    const float step = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + (decay[i] ? wd * params[i] : 0.0f);
    params[i] -= flr * step;
  }
}

}  // namespace aah::cpu
