// Reference kernels for everything but attention. Shape legend in kernels/ops.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/bf16/bf16.h"
#include "kernels/ops.h"

namespace aah::ref {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) out[(int64_t)n * C + c] = wte[(int64_t)tokens[n] * C + c];
}

template <class T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) dwte[(int64_t)tokens[n] * C + c] += dout[(int64_t)n * C + c];
}

// out = x / sqrt(mean(x^2) + eps) * w
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, float eps) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (int64_t)n * C;
    T ss = 0;
    for (int c = 0; c < C; c++) ss += xn[c] * xn[c];
    T r = T(1) / std::sqrt(ss / C + T(eps));
    rstd[n] = r;
    for (int c = 0; c < C; c++) out[(int64_t)n * C + c] = xn[c] * r * w[c];
  }
}

// With xhat = x r: dw += dout xhat; dx = r (dout w - xhat mean(dout w xhat)).
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* xn = x + (int64_t)n * C;
    const T* dn = dout + (int64_t)n * C;
    T r = rstd[n], dot = 0;
    for (int c = 0; c < C; c++) dot += dn[c] * w[c] * xn[c] * r;
    dot /= C;
    for (int c = 0; c < C; c++) {
      T xhat = xn[c] * r;
      dw[c] += dn[c] * xhat;
      dx[(int64_t)n * C + c] = r * (dn[c] * w[c] - xhat * dot);
    }
  }
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      T s = 0;
      for (int c = 0; c < C; c++) s += inp[(int64_t)n * C + c] * w[(int64_t)o * C + c];
      out[(int64_t)n * OC + o] = s;
    }
}

// n bf16 values widened to T (exact).
template <class T>
std::vector<T> widened(const uint16_t* w, size_t n) {
  std::vector<T> wide(n);
  for (size_t i = 0; i < n; i++) wide[i] = T(bf16::widen(w[i]));
  return wide;
}

// The forward product with w stored in bf16 (matmul_forward_bf16w): each weight widened, then the above.
template <class T>
void matmul_forward_bf16w(T* out, const T* inp, const uint16_t* w, int N, int C, int OC) {
  matmul_forward<T>(out, inp, widened<T>(w, size_t(OC) * C).data(), N, C, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  if (dinp)
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        T s = 0;
        for (int o = 0; o < OC; o++) s += dout[(int64_t)n * OC + o] * w[(int64_t)o * C + c];
        dinp[(int64_t)n * C + c] = s;
      }
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      T s = 0;
      for (int n = 0; n < N; n++) s += dout[(int64_t)n * OC + o] * inp[(int64_t)n * C + c];
      dw[(int64_t)o * C + c] += s;
    }
}

// The backward product with w stored in bf16 (matmul_backward_bf16w): each weight widened, then the above.
template <class T>
void matmul_backward_bf16w(T* dinp, T* dw, const T* dout, const T* inp, const uint16_t* w, int N, int C, int OC) {
  matmul_backward<T>(dinp, dw, dout, inp, widened<T>(w, size_t(OC) * C).data(), N, C, OC);
}

// The backward product with dout and w both stored in bf16 (matmul_backward_bf16): both widened, then the above.
template <class T>
void matmul_backward_bf16(T* dinp, T* dw, const uint16_t* dout, const T* inp, const uint16_t* w, int N, int C, int OC) {
  matmul_backward<T>(dinp, dw, widened<T>(dout, size_t(N) * OC).data(), inp, widened<T>(w, size_t(OC) * C).data(), N, C,
                     OC);
}

// Index of element (b, h, t, d) in a (B, Hn, T, D) tensor.
inline int64_t bhtd(int b, int h, int t, int d, int Hn, int T, int D) {
  return (((int64_t)b * Hn + h) * T + t) * D + d;
}

template <class T>
void qkv_split_forward(T* q, T* k, T* v, const T* qkv, int B, int T_, int H, int Hkv, int D) {
  const int W = (H + 2 * Hkv) * D;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T_; t++) {
      const T* row = qkv + ((int64_t)b * T_ + t) * W;
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) q[bhtd(b, h, t, d, H, T_, D)] = row[h * D + d];
      for (int h = 0; h < Hkv; h++)
        for (int d = 0; d < D; d++) {
          k[bhtd(b, h, t, d, Hkv, T_, D)] = row[(H + h) * D + d];
          v[bhtd(b, h, t, d, Hkv, T_, D)] = row[(H + Hkv + h) * D + d];
        }
    }
}

template <class T>
void qkv_split_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int T_, int H, int Hkv, int D) {
  const int W = (H + 2 * Hkv) * D;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T_; t++) {
      T* row = dqkv + ((int64_t)b * T_ + t) * W;
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) row[h * D + d] = dq[bhtd(b, h, t, d, H, T_, D)];
      for (int h = 0; h < Hkv; h++)
        for (int d = 0; d < D; d++) {
          row[(H + h) * D + d] = dk[bhtd(b, h, t, d, Hkv, T_, D)];
          row[(H + Hkv + h) * D + d] = dv[bhtd(b, h, t, d, Hkv, T_, D)];
        }
    }
}

template <class T>
void heads_merge_forward(T* out, const T* inp, int B, int H, int T_, int D) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T_; t++)
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++)
          out[(((int64_t)b * T_ + t) * H + h) * D + d] = inp[bhtd(b, h, t, d, H, T_, D)];
}

template <class T>
void heads_merge_backward(T* dinp, const T* dout, int B, int H, int T_, int D) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T_; t++)
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++)
          dinp[bhtd(b, h, t, d, H, T_, D)] = dout[(((int64_t)b * T_ + t) * H + h) * D + d];
}

// x1 = x[:D/2], x2 = x[D/2:]: out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
template <class T, class U>
void rope_forward(T* x, const U* cos, const U* sin, int BH, int T_, int D) {
  const int half = D / 2;
  for (int bh = 0; bh < BH; bh++)
    for (int t = 0; t < T_; t++) {
      T* r = x + ((int64_t)bh * T_ + t) * D;
      for (int i = 0; i < half; i++) {
        T c = cos[t * half + i], s = sin[t * half + i];
        T x1 = r[i], x2 = r[i + half];
        r[i] = x1 * c - x2 * s;
        r[i + half] = x2 * c + x1 * s;
      }
    }
}

// The transpose of the rotation: rotate by -angle.
template <class T, class U>
void rope_backward(T* dx, const U* cos, const U* sin, int BH, int T_, int D) {
  const int half = D / 2;
  for (int bh = 0; bh < BH; bh++)
    for (int t = 0; t < T_; t++) {
      T* r = dx + ((int64_t)bh * T_ + t) * D;
      for (int i = 0; i < half; i++) {
        T c = cos[t * half + i], s = sin[t * half + i];
        T d1 = r[i], d2 = r[i + half];
        r[i] = d1 * c + d2 * s;
        r[i + half] = d2 * c - d1 * s;
      }
    }
}

template <class T>
void swiglu_forward(T* out, const T* h, int N, int F) {
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      T g = h[(int64_t)n * 2 * F + f], u = h[(int64_t)n * 2 * F + F + f];
      out[(int64_t)n * F + f] = g / (T(1) + std::exp(-g)) * u;
    }
}

template <class T>
void swiglu_backward(T* dh, const T* dout, const T* h, int N, int F) {
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      T g = h[(int64_t)n * 2 * F + f], u = h[(int64_t)n * 2 * F + F + f];
      T sig = T(1) / (T(1) + std::exp(-g));
      T d = dout[(int64_t)n * F + f];
      dh[(int64_t)n * 2 * F + f] = d * u * sig * (T(1) + g * (T(1) - sig));
      dh[(int64_t)n * 2 * F + F + f] = d * g * sig;
    }
}

template <class T>
void crossentropy_forward_backward(T* losses, T* dlogits, const T* logits, const int32_t* targets, int N, int V,
                                   float dscale) {
  for (int n = 0; n < N; n++) {
    const T* l = logits + (int64_t)n * V;
    T mx = l[0];
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    T sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp(l[i] - mx);
    T lse = mx + std::log(sum);
    T target_logit = l[targets[n]];
    losses[n] = lse - target_logit;
    if (dlogits) {
      T* d = dlogits + (int64_t)n * V;
      for (int i = 0; i < V; i++) d[i] = (std::exp(l[i] - lse) - (i == targets[n] ? T(1) : T(0))) * T(dscale);
    }
  }
}

// The same with dlogits rounded to bf16 (round to nearest even, from the value at float).
template <class T>
void crossentropy_forward_backward_bf16(T* losses, uint16_t* dlogits, const T* logits, const int32_t* targets, int N,
                                        int V, float dscale) {
  std::vector<T> d(size_t(N) * V);
  crossentropy_forward_backward<T>(losses, d.data(), logits, targets, N, V, dscale);
  for (size_t i = 0; i < d.size(); i++) dlogits[i] = bf16::round(float(d[i]));
}

// swiglu_backward with dh rounded to bf16 (from the value at float).
template <class T>
void swiglu_backward_bf16(uint16_t* dh, const T* dout, const T* h, int N, int F) {
  std::vector<T> d(size_t(N) * 2 * F);
  swiglu_backward<T>(d.data(), dout, h, N, F);
  for (size_t i = 0; i < d.size(); i++) dh[i] = bf16::round(float(d[i]));
}

// out_i = exp(x_i - shift), summed in order; out may be x.
template <class T>
T exp_shifted_sum(T* out, const T* x, T shift, int n) {
  T sum = 0;
  for (int i = 0; i < n; i++) sum += (out[i] = std::exp(x[i] - shift));
  return sum;
}

// x_i *= scale for i < n; returns the largest.
template <class T>
T scale_max(T* x, int n, T scale) {
  T mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = std::max(mx, x[i] *= scale);
  return mx;
}

template <class T>
void residual_add(T* y, const T* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

template <class T>
double sum_squares(const T* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += double(x[i]) * double(x[i]);
  return s;
}

// AdamW as train/optimizer.h states it, one parameter at a time.
template <class T>
void adamw_update(T* params, T* m, T* v, const uint8_t* decay, const T* grads, size_t n, const AdamWStep& s) {
  for (size_t i = 0; i < n; i++) {
    const T g = grads[i] * T(s.grad_scale);
    m[i] = T(s.beta1) * m[i] + (1 - T(s.beta1)) * g;
    v[i] = T(s.beta2) * v[i] + (1 - T(s.beta2)) * g * g;
    const T step =
        m[i] * T(s.c1) / (std::sqrt(v[i] * T(s.c2)) + T(s.eps)) + (decay[i] ? T(s.weight_decay) * params[i] : T(0));
    params[i] -= T(s.lr) * step;
  }
}

}  // namespace aah::ref
