// Reference causal attention with one window per head: softmax(q k^T / sqrt(D) + mask_W) v, row by row, no
// tiling. Backward from the definition: dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = dS K / sqrt(D), ...
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention_common.h"
#include "kernels/ref/basic.h"

namespace aah::ref {

template <class T>
void attn_local_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int* window, int B, int H,
                        int Hkv, int T_, int D, AttnDiagnostics* diag, AttnCounters* counters) {
  const T scale = T(1) / std::sqrt(T(D));
  const int group = H / Hkv;
  std::vector<T> p(T_);
  for (int h = 0; h < H && diag; h++) {
    if (diag->entropy) diag->entropy[h] = 0;
    if (diag->out_norm) diag->out_norm[h] = 0;
    if (diag->usage) diag->usage[h] = 0;
  }
  uint64_t pairs = 0;  // visible (query, key) pairs: the reference computes exactly those
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group, W = window[h];
      for (int i = 0; i < T_; i++) {
        const T* qi = q + bhtd(b, h, i, 0, H, T_, D);
        T mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
          if (!attn_visible(i, j, W)) continue;
          pairs++;
          const T* kj = k + bhtd(b, hk, j, 0, Hkv, T_, D);
          T s = 0;
          for (int d = 0; d < D; d++) s += qi[d] * kj[d];
          p[j] = s * scale;
          mx = p[j] > mx ? p[j] : mx;
        }
        T sum = 0;
        for (int j = 0; j <= i; j++)
          if (attn_visible(i, j, W)) sum += std::exp(p[j] - mx);
        const T l = mx + std::log(sum);
        lse[((int64_t)b * H + h) * T_ + i] = l;
        T* oi = out + bhtd(b, h, i, 0, H, T_, D);
        for (int d = 0; d < D; d++) oi[d] = 0;
        T entropy = 0, dist = 0;
        for (int j = 0; j <= i; j++) {
          if (!attn_visible(i, j, W)) continue;
          const T pj = std::exp(p[j] - l);
          if (pj > 0) entropy -= pj * std::log(pj);
          dist += pj * T(i - j);
          const T* vj = v + bhtd(b, hk, j, 0, Hkv, T_, D);
          for (int d = 0; d < D; d++) oi[d] += pj * vj[d];
        }
        if (diag) {
          const double n = double(B) * T_;
          T norm = 0;
          for (int d = 0; d < D; d++) norm += oi[d] * oi[d];
          if (diag->entropy) diag->entropy[h] += double(entropy) / n;
          if (diag->out_norm) diag->out_norm[h] += std::sqrt(double(norm)) / n;
          if (diag->usage && W > 1) diag->usage[h] += double(dist) / (W - 1) / n;
        }
      }
    }
  if (counters) {
    counters->fwd_pairs += pairs;
    counters->fwd_pairs_computed += pairs;
    counters->macs += 2 * pairs * uint64_t(D);  // q.k and p v
  }
}

template <class T>
void attn_local_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                         const T* v, const int* window, int B, int H, int Hkv, int T_, int D,
                         AttnCounters* counters) {
  const T scale = T(1) / std::sqrt(T(D));
  const int group = H / Hkv;
  for (int64_t i = 0; i < (int64_t)B * H * T_ * D; i++) dq[i] = 0;
  for (int64_t i = 0; i < (int64_t)B * Hkv * T_ * D; i++) dk[i] = 0, dv[i] = 0;
  uint64_t pairs = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group, W = window[h];
      for (int i = 0; i < T_; i++) {
        const T* qi = q + bhtd(b, h, i, 0, H, T_, D);
        const T* doi = dout + bhtd(b, h, i, 0, H, T_, D);
        const T* oi = out + bhtd(b, h, i, 0, H, T_, D);
        T delta = 0;
        for (int d = 0; d < D; d++) delta += doi[d] * oi[d];
        const T l = lse[((int64_t)b * H + h) * T_ + i];
        for (int j = 0; j <= i; j++) {
          if (!attn_visible(i, j, W)) continue;
          pairs++;
          const T* kj = k + bhtd(b, hk, j, 0, Hkv, T_, D);
          const T* vj = v + bhtd(b, hk, j, 0, Hkv, T_, D);
          T s = 0, dp = 0;
          for (int d = 0; d < D; d++) s += qi[d] * kj[d], dp += doi[d] * vj[d];
          const T pj = std::exp(s * scale - l);
          const T ds = pj * (dp - delta) * scale;
          T* dqi = dq + bhtd(b, h, i, 0, H, T_, D);
          T* dkj = dk + bhtd(b, hk, j, 0, Hkv, T_, D);
          T* dvj = dv + bhtd(b, hk, j, 0, Hkv, T_, D);
          for (int d = 0; d < D; d++) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += pj * doi[d];
          }
        }
      }
    }
  if (counters) {
    counters->bwd_pairs += pairs;
    counters->bwd_pairs_computed += pairs;
    counters->macs += 5 * pairs * uint64_t(D);  // q.k, do.v, dq, dk, dv
  }
}

}  // namespace aah::ref
