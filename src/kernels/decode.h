// Decoding kernels: one query row of one head against its cached keys and values in a ring buffer.
// Kept out of ops.h (training never calls them); cpu:: in kernels/cpu/decode.cpp, ref:: below.
//
// D head dim; cap ring length in positions; n positions attended (n <= cap).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace aah {

namespace cpu {
// q (D) against the n cached positions of its key/value rings k, v (cap, D), oldest first, starting at ring row
// `start` and wrapping at cap. out (D) = softmax(q k^T / sqrt(D)) v. scores: n floats of scratch.
void attn_decode_forward(float* out, const float* q, const float* k, const float* v, int cap, int start, int n,
                         int D, float* scores);
}  // namespace cpu

namespace bf16 {
// The same with the rings in bf16 (the bf16 KV cache: half the bytes read per position); q, out and the softmax
// in fp32. kernels/bf16/decode.cpp.
void attn_decode_forward(float* out, const float* q, const uint16_t* k, const uint16_t* v, int cap, int start, int n,
                         int D, float* scores);
}  // namespace bf16

namespace ref {
// The same from the definition, one position at a time.
template <class T>
void attn_decode_forward(T* out, const T* q, const T* k, const T* v, int cap, int start, int n, int D, T* scores) {
  const T scale = T(1) / std::sqrt(T(D));
  T mx = -INFINITY;
  for (int j = 0; j < n; j++) {
    const int64_t r = (start + j) % cap;
    T s = 0;
    for (int d = 0; d < D; d++) s += q[d] * k[r * D + d];
    scores[j] = s * scale;
    mx = std::max(mx, scores[j]);
  }
  T sum = 0;
  for (int j = 0; j < n; j++) sum += (scores[j] = std::exp(scores[j] - mx));
  for (int d = 0; d < D; d++) out[d] = 0;
  for (int j = 0; j < n; j++) {
    const int64_t r = (start + j) % cap;
    for (int d = 0; d < D; d++) out[d] += scores[j] / sum * v[r * D + d];
  }
}

// The bf16 rings' reference: each stored value widened (bf16 -> fp32 is exact), then the above.
template <class T>
void attn_decode_forward_bf16(T* out, const T* q, const uint16_t* k, const uint16_t* v, int cap, int start, int n,
                              int D, T* scores) {
  std::vector<T> kw(size_t(cap) * D), vw(size_t(cap) * D);
  for (size_t i = 0; i < kw.size(); i++) {
    const uint32_t uk = uint32_t(k[i]) << 16, uv = uint32_t(v[i]) << 16;
    float fk, fv;
    std::memcpy(&fk, &uk, 4);
    std::memcpy(&fv, &uv, 4);
    kw[i] = T(fk), vw[i] = T(fv);
  }
  attn_decode_forward<T>(out, q, kw.data(), vw.data(), cap, start, n, D, scores);
}
}  // namespace ref

}  // namespace aah
