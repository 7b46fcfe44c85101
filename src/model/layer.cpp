#include "model/layer.h"

#include <cmath>
#include <cstring>

#include "kernels/backend.h"

namespace aah {

template <class real>
void rope_angles(real* cos, real* sin, int pos0, int T, int D, double theta) {
  const int half = D / 2;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      const double inv_freq = std::pow(theta, -2.0 * i / D);
      const int pos = pos0 + t;
      cos[size_t(t) * half + i] = real(std::cos(pos * inv_freq));
      sin[size_t(t) * half + i] = real(std::sin(pos * inv_freq));
    }
}

template <class real>
void weight_product(const Backend<real>& be, real* out, const real* inp, const real* w, const uint16_t* w16, int N,
                    int C, int OC) {
  if (w16)
    be.matmul_forward_bf16w(out, inp, w16, N, C, OC);
  else
    be.matmul_forward(out, inp, w, N, C, OC);
}

template <class real>
void weight_product_backward(const Backend<real>& be, real* dinp, real* dw, const real* dout, const real* inp,
                             const real* w, const uint16_t* w16, int N, int C, int OC) {
  if (w16)
    be.matmul_backward_bf16w(dinp, dw, dout, inp, w16, N, C, OC);
  else
    be.matmul_backward(dinp, dw, dout, inp, w, N, C, OC);
}

template <class real>
void layer_forward_pre_attention(const Backend<real>& be, const LayerActs<real>& a, const LayerWeights<real>& w,
                                 const ModelConfig& m, int B, int T, const real* rope_cos, const real* rope_sin,
                                 const LayerWeights16* w16) {
  const int N = B * T, C = m.hidden_size, H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim,
            QKV = (H + 2 * Hkv) * D;
  const float eps = float(m.rms_norm_eps);
  be.rmsnorm_forward(a.ln1, a.rstd1, a.x, w.ln1, N, C, eps);
  weight_product(be, a.qkv, a.ln1, w.wqkv, w16 ? w16->wqkv : nullptr, N, C, QKV);
  be.qkv_split_forward(a.q_pre, a.k_pre, a.v, a.qkv, B, T, H, Hkv, D);
  if (m.qk_norm) {
    be.rmsnorm_forward(a.q, a.rstd_q, a.q_pre, w.q_norm, N * H, D, eps);
    be.rmsnorm_forward(a.k, a.rstd_k, a.k_pre, w.k_norm, N * Hkv, D, eps);
  } else {
    be.memory.copy(a.q, a.q_pre, size_t(N) * H * D * sizeof(real));
    be.memory.copy(a.k, a.k_pre, size_t(N) * Hkv * D * sizeof(real));
  }
  be.rope_forward(a.q, rope_cos, rope_sin, B * H, T, D);
  be.rope_forward(a.k, rope_cos, rope_sin, B * Hkv, T, D);
}

template <class real>
void layer_forward_post_attention(const Backend<real>& be, const LayerActs<real>& a, const LayerWeights<real>& w,
                                  const ModelConfig& m, int B, int T, const LayerWeights16* w16) {
  const int N = B * T, C = m.hidden_size, H = m.num_attention_heads, D = m.head_dim, F = m.intermediate_size;
  const size_t NC = size_t(N) * C;
  const float eps = float(m.rms_norm_eps);
  // attention half: xa = x + o_proj(merge(att))
  be.heads_merge_forward(a.merged, a.att, B, H, T, D);
  weight_product(be, a.xa, a.merged, w.wo, w16 ? w16->wo : nullptr, N, H * D, C);
  be.residual_add(a.xa, a.x, NC);
  // MLP half: x_out = xa + down(swiglu(gate_up(rmsnorm(xa))))
  be.rmsnorm_forward(a.ln2, a.rstd2, a.xa, w.ln2, N, C, eps);
  weight_product(be, a.h, a.ln2, w.w_gate_up, w16 ? w16->w_gate_up : nullptr, N, C, 2 * F);
  be.swiglu_forward(a.act, a.h, N, F);
  weight_product(be, a.x_out, a.act, w.w_down, w16 ? w16->w_down : nullptr, N, F, C);
  be.residual_add(a.x_out, a.xa, NC);
}

template <class real>
void layer_backward_post_attention(const Backend<real>& be, const BackwardScratch<real>& d, const LayerWeights<real>& g,
                                   const LayerActs<real>& a, const LayerWeights<real>& w, const ModelConfig& m, int B,
                                   int T, const LayerWeights16* w16) {
  const int N = B * T, C = m.hidden_size, H = m.num_attention_heads, D = m.head_dim, F = m.intermediate_size;
  const size_t NC = size_t(N) * C;
  // MLP half
  weight_product_backward(be, d.dact, g.w_down, d.dres, a.act, w.w_down, w16 ? w16->w_down : nullptr, N, F, C);
  if (w16) {  // dh written in bf16 at once, the operand the product reads
    be.swiglu_backward_bf16(d.dh16, d.dact, a.h, N, F);
    be.matmul_backward_bf16(d.dln, g.w_gate_up, d.dh16, a.ln2, w16->w_gate_up, N, C, 2 * F);
  } else {
    be.swiglu_backward(d.dh, d.dact, a.h, N, F);
    be.matmul_backward(d.dln, g.w_gate_up, d.dh, a.ln2, w.w_gate_up, N, C, 2 * F);
  }
  be.rmsnorm_backward(d.dtmp, g.ln2, d.dln, a.xa, w.ln2, a.rstd2, N, C);
  be.residual_add(d.dres, d.dtmp, NC);
  // o_proj and the merge
  be.heads_merge_forward(a.merged, a.att, B, H, T, D);  // recomputed instead of stored
  // a.qkv as scratch for d(merged)
  weight_product_backward(be, a.qkv, g.wo, d.dres, a.merged, w.wo, w16 ? w16->wo : nullptr, N, H * D, C);
  be.heads_merge_backward(d.dq_pre, a.qkv, B, H, T, D);  // d.dq_pre as scratch for d(att)
}

template <class real>
void layer_backward_pre_attention(const Backend<real>& be, const BackwardScratch<real>& d, const LayerWeights<real>& g,
                                  const LayerActs<real>& a, const LayerWeights<real>& w, const ModelConfig& m, int B,
                                  int T, const real* rope_cos, const real* rope_sin, const LayerWeights16* w16) {
  const int N = B * T, C = m.hidden_size, H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim,
            QKV = (H + 2 * Hkv) * D;
  const size_t NC = size_t(N) * C;
  be.rope_backward(d.dq, rope_cos, rope_sin, B * H, T, D);
  be.rope_backward(d.dk, rope_cos, rope_sin, B * Hkv, T, D);
  if (m.qk_norm) {
    be.rmsnorm_backward(d.dq_pre, g.q_norm, d.dq, a.q_pre, w.q_norm, a.rstd_q, N * H, D);
    be.rmsnorm_backward(d.dk_pre, g.k_norm, d.dk, a.k_pre, w.k_norm, a.rstd_k, N * Hkv, D);
  } else {
    be.memory.copy(d.dq_pre, d.dq, size_t(N) * H * D * sizeof(real));
    be.memory.copy(d.dk_pre, d.dk, size_t(N) * Hkv * D * sizeof(real));
  }
  be.qkv_split_backward(a.qkv, d.dq_pre, d.dk_pre, d.dv, B, T, H, Hkv, D);
  weight_product_backward(be, d.dln, g.wqkv, a.qkv, a.ln1, w.wqkv, w16 ? w16->wqkv : nullptr, N, C, QKV);
  be.rmsnorm_backward(d.dtmp, g.ln1, d.dln, a.x, w.ln1, a.rstd1, N, C);
  be.residual_add(d.dres, d.dtmp, NC);
}

#define AAH_LAYER_INSTANTIATE(real)                                                                                    \
  template void rope_angles<real>(real*, real*, int, int, int, double);                                                \
  template void layer_forward_pre_attention<real>(const Backend<real>&, const LayerActs<real>&,                        \
                                                  const LayerWeights<real>&, const ModelConfig&, int, int,             \
                                                  const real*, const real*, const LayerWeights16*);                    \
  template void layer_forward_post_attention<real>(const Backend<real>&, const LayerActs<real>&,                       \
                                                   const LayerWeights<real>&, const ModelConfig&, int, int,            \
                                                   const LayerWeights16*);                                             \
  template void layer_backward_post_attention<real>(                                                                   \
      const Backend<real>&, const BackwardScratch<real>&, const LayerWeights<real>&, const LayerActs<real>&,           \
      const LayerWeights<real>&, const ModelConfig&, int, int, const LayerWeights16*);                                 \
  template void layer_backward_pre_attention<real>(                                                                    \
      const Backend<real>&, const BackwardScratch<real>&, const LayerWeights<real>&, const LayerActs<real>&,           \
      const LayerWeights<real>&, const ModelConfig&, int, int, const real*, const real*, const LayerWeights16*);       \
  template void weight_product<real>(const Backend<real>&, real*, const real*, const real*, const uint16_t*, int, int, \
                                     int);                                                                             \
  template void weight_product_backward<real>(const Backend<real>&, real*, real*, const real*, const real*,            \
                                              const real*, const uint16_t*, int, int, int);
AAH_LAYER_INSTANTIATE(float)
AAH_LAYER_INSTANTIATE(double)
#undef AAH_LAYER_INSTANTIATE

}  // namespace aah
