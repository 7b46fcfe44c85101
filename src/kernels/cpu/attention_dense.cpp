// Dense-masked causal attention with one window per head: the paper's PyTorch execution, kept for comparisons.
// Per (batch, head) it materializes the full T x T score matrix S = Q K^T / sqrt(D) with sgemm, applies the window
// mask (-inf), takes the row softmax over all T columns and computes O = P V with sgemm. Work is T^2 per head
// whatever the window. The backward recomputes P from lse (the interface does not pass P; autograd would have
// saved it, which costs the same T x T memory) and runs dV = P^T dO, dP = dO V^T, dS = P (dP - Delta) / sqrt(D),
// dQ = dS K, dK = dS^T Q as sgemms.
//
// Shapes: B batch, H query heads, Hkv key/value heads (head h reads kv head h / (H / Hkv)), T positions, D head dim.
//   q, out, dout, dq (B, H, T, D)   k, v, dk, dv (B, Hkv, T, D)   lse (B, H, T)   window (H)
// Scratch (grown, reused): s, dp (T, T); row diagnostics (T, 3).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/arena.h"
#include "core/check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah::cpu {
namespace {

struct DenseScratch {
  Buffer<float> s, dp;     // (T, T)
  Buffer<double> rowdiag;  // (T, 3)
};

DenseScratch& dense_scratch() {
  thread_local DenseScratch s;
  return s;
}

template <class U>
void dense_grow(Buffer<U>& b, size_t n) {
  if (b.size < n) b.resize(n);
}

inline int64_t dense_row(int b, int h, int t, int Hn, int T) { return ((int64_t)b * Hn + h) * T + t; }

void dense_check(int B, int H, int Hkv, int T, int D, const int* window, const char* op) {
  if (B < 0 || H < 1 || Hkv < 1 || T < 0 || D < 1 || H % Hkv != 0)
    fail("[", op, "] bad shape B=", B, " H=", H, " Hkv=", Hkv, " T=", T, " D=", D, " (H must be a multiple of Hkv)");
  for (int h = 0; h < H; h++)
    if (window[h] < 1) fail("[", op, "] window of head ", h, " is ", window[h], ", must be >= 1");
}

}  // namespace

void attn_dense_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters) {
  dense_check(B, H, Hkv, T, D, window, "attn_dense_forward");
  const bool want_diag = diag && (diag->entropy || diag->out_norm || diag->usage);
  DenseScratch& sc = dense_scratch();
  dense_grow(sc.s, std::max<size_t>(1, (size_t)T * T));
  if (want_diag) dense_grow(sc.rowdiag, std::max<size_t>(1, (size_t)T * 3));
  float* S = sc.s.data;
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv;
  const bool big = (int64_t)T * T >= (1 << 16);  // threads only where they pay for their start
  if (want_diag)
    for (int h = 0; h < H; h++) {
      if (diag->entropy) diag->entropy[h] = 0;
      if (diag->out_norm) diag->out_norm[h] = 0;
      if (diag->usage) diag->usage[h] = 0;
    }

  for (int b = 0; b < B && T > 0; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group, W = window[h];
      const float* qh = q + dense_row(b, h, 0, H, T) * D;
      const float* kh = k + dense_row(b, hk, 0, Hkv, T) * D;
      const float* vh = v + dense_row(b, hk, 0, Hkv, T) * D;
      float* oh = out + dense_row(b, h, 0, H, T) * D;
      float* lh = lse + dense_row(b, h, 0, H, T);
      // S = scale Q K^T, the full T x T
      gemm(false, true, T, T, D, scale, qh, D, kh, D, 0.0f, S, T);
#pragma omp parallel for schedule(static) if (big)
      for (int i = 0; i < T; i++) {
        float* row = S + (int64_t)i * T;
        float mx = -INFINITY;
        for (int j = 0; j < T; j++) {
          row[j] = attn_visible(i, j, W) ? row[j] : -INFINITY;
          mx = std::max(mx, row[j]);
        }
        const float sum = vexp_shifted_sum</*MASKED=*/true>(row, row, mx, T);  // masked -inf give 0
        const float inv = 1.0f / sum;
        for (int j = 0; j < T; j++) row[j] *= inv;
        lh[i] = mx + std::log(sum);
      }
      gemm(false, false, T, D, T, 1.0f, S, T, vh, D, 0.0f, oh, D);
      if (want_diag) {
        double* rd = sc.rowdiag.data;
#pragma omp parallel for schedule(static) if (big)
        for (int i = 0; i < T; i++) {
          const float* row = S + (int64_t)i * T;
          double ent = 0, dist = 0, nrm = 0;
          for (int j = 0; j < T; j++)
            if (row[j] > 0) ent -= (double)row[j] * std::log((double)row[j]), dist += (double)row[j] * (i - j);
          for (int d = 0; d < D; d++) nrm += (double)oh[(int64_t)i * D + d] * oh[(int64_t)i * D + d];
          rd[3 * i] = ent, rd[3 * i + 1] = std::sqrt(nrm), rd[3 * i + 2] = W > 1 ? dist / (W - 1) : 0.0;
        }
        const double n = (double)B * T;
        for (int i = 0; i < T; i++) {
          if (diag->entropy) diag->entropy[h] += rd[3 * i] / n;
          if (diag->out_norm) diag->out_norm[h] += rd[3 * i + 1] / n;
          if (diag->usage) diag->usage[h] += rd[3 * i + 2] / n;
        }
      }
    }
  if (counters) {
    for (int h = 0; h < H; h++) counters->fwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->fwd_pairs_computed += (uint64_t)B * H * T * T;
    counters->fwd_tiles_visited += (uint64_t)B * H;  // one T x T block per head
    counters->macs += (uint64_t)B * H * 2 * T * T * D;
  }
}

void attn_dense_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters) {
  dense_check(B, H, Hkv, T, D, window, "attn_dense_backward");
  DenseScratch& sc = dense_scratch();
  dense_grow(sc.s, std::max<size_t>(1, (size_t)T * T));
  dense_grow(sc.dp, std::max<size_t>(1, (size_t)T * T));
  float* P = sc.s.data;
  float* dP = sc.dp.data;
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv;
  const bool big = (int64_t)T * T >= (1 << 16);  // threads only where they pay for their start

  for (int b = 0; b < B && T > 0; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group, W = window[h];
      const float beta = h % group == 0 ? 0.0f : 1.0f;  // first head of a group writes dK, dV; the others add
      const float* qh = q + dense_row(b, h, 0, H, T) * D;
      const float* kh = k + dense_row(b, hk, 0, Hkv, T) * D;
      const float* vh = v + dense_row(b, hk, 0, Hkv, T) * D;
      const float* oh = out + dense_row(b, h, 0, H, T) * D;
      const float* doh = dout + dense_row(b, h, 0, H, T) * D;
      const float* lh = lse + dense_row(b, h, 0, H, T);
      float* dqh = dq + dense_row(b, h, 0, H, T) * D;
      float* dkh = dk + dense_row(b, hk, 0, Hkv, T) * D;
      float* dvh = dv + dense_row(b, hk, 0, Hkv, T) * D;
      gemm(false, true, T, T, D, scale, qh, D, kh, D, 0.0f, P, T);
#pragma omp parallel for schedule(static) if (big)
      for (int i = 0; i < T; i++) {
        float* row = P + (int64_t)i * T;
        for (int j = 0; j < T; j++) row[j] = attn_visible(i, j, W) ? row[j] : -INFINITY;
        vexp_shifted_sum</*MASKED=*/true>(row, row, lh[i], T);
      }
      gemm(true, false, T, D, T, 1.0f, P, T, doh, D, beta, dvh, D);
      gemm(false, true, T, T, D, 1.0f, doh, D, vh, D, 0.0f, dP, T);
#pragma omp parallel for schedule(static) if (big)
      for (int i = 0; i < T; i++) {
        float delta = 0;
        for (int d = 0; d < D; d++) delta = std::fma(doh[(int64_t)i * D + d], oh[(int64_t)i * D + d], delta);
        const float* p = P + (int64_t)i * T;
        float* g = dP + (int64_t)i * T;
        for (int j = 0; j < T; j++) g[j] = p[j] * (g[j] - delta) * scale;
      }
      gemm(false, false, T, D, T, 1.0f, dP, T, kh, D, 0.0f, dqh, D);
      gemm(true, false, T, D, T, 1.0f, dP, T, qh, D, beta, dkh, D);
    }
  if (counters) {
    for (int h = 0; h < H; h++) counters->bwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->bwd_pairs_computed += (uint64_t)B * H * T * T;
    counters->bwd_tiles_visited += (uint64_t)B * H;
    counters->macs += (uint64_t)B * H * 5 * T * T * D;
  }
}

}  // namespace aah::cpu
