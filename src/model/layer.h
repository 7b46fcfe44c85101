// One transformer layer as views and free functions (as gemma.cpp's weights.GetLayer(l)): the model's loops and
// the decoder's single-token step both run a layer through these, so the layer is written once.
//
//   x -> rmsnorm -> qkv -> split heads -> qk-norm -> rope          layer_forward_pre_attention
//     -> attention(windows)                                          the caller's: the model's dispatch
//                                                                    (kernels/dispatch.h) or the decoder's KV cache
//     -> merge heads -> o_proj -> + x -> rmsnorm -> swiglu mlp -> +   layer_forward_post_attention
//
// Backward mirrors it: layer_backward_post_attention (MLP and o_proj, down to d(attention output)), the caller's
// attention backward, then layer_backward_pre_attention (rope, qk-norm, qkv, norm, into d(residual)).
//
// B batch, T positions, N = B*T rows, C hidden, H query heads, Hkv key/value heads, D head dim, F intermediate
// size, QKV = (H + 2 Hkv) D.
#pragma once
#include "kernels/backend.h"
#include "model/config.h"

namespace aah {

// One layer's parameters (or their gradients): pointers into the flat buffer, from Params::layer(l).
template <class real>
struct LayerWeights {
  real* ln1;        // (C)      input_layernorm
  real* wqkv;       // (QKV, C) rows: q_proj (H D), k_proj (Hkv D), v_proj (Hkv D)
  real* q_norm;     // (D)
  real* k_norm;     // (D)
  real* wo;         // (C, H D)
  real* ln2;        // (C)      post_attention_layernorm
  real* w_gate_up;  // (2F, C)  rows: gate_proj (F), up_proj (F)
  real* w_down;     // (C, F)
};

// The same layer's matrices rounded to bf16 once, kept by the decoder on a bf16 backend (the forward products then
// read half the bytes: matmul_forward_bf16w).
struct LayerWeights16 {
  const uint16_t* wqkv;
  const uint16_t* wo;
  const uint16_t* w_gate_up;
  const uint16_t* w_down;
};

// One layer's activations for a micro-batch of N = B*T rows, from Activations::layer(l, slot, N). The attention
// kernel reads q, k, v and writes att (and lse); qkv and merged are scratch shared by all layers.
template <class real>
struct LayerActs {
  real* x;       // (N, C) residual stream entering the layer
  real* ln1;     // (N, C)
  real* rstd1;   // (N)
  real* qkv;     // (N, QKV) projection output / its gradient (scratch)
  real* q_pre;   // (B, H, T, D) before QK-norm
  real* k_pre;   // (B, Hkv, T, D)
  real* rstd_q;  // (B H T)
  real* rstd_k;  // (B Hkv T)
  real* q;       // (B, H, T, D) after QK-norm and RoPE
  real* k;       // (B, Hkv, T, D)
  real* v;       // (B, Hkv, T, D)
  real* att;     // (B, H, T, D) attention output per head
  real* lse;     // (B, H, T) row log-sum-exp of the scores (attention backward)
  real* merged;  // (N, H D) heads concatenated / its gradient (scratch)
  real* xa;      // (N, C) residual after the attention half
  real* ln2;     // (N, C)
  real* rstd2;   // (N)
  real* h;       // (N, 2F) gate | up
  real* act;     // (N, F) silu(gate) * up
  real* x_out;   // (N, C) residual stream leaving the layer (the next layer's x; may be x itself)
};

// Gradient scratch of the backward pass, shared by all layers.
template <class real>
struct BackwardScratch {
  real* dres;    // (N, C) d(residual stream): d(layer output) in, d(layer input) out
  real* dtmp;    // (N, C)
  real* dln;     // (N, C)
  real* dact;    // (N, F)
  real* dh;      // (N, 2F)
  real* dq;      // (B, H, T, D)
  real* dk;      // (B, Hkv, T, D)
  real* dv;      // (B, Hkv, T, D)
  real* dq_pre;  // (B, H, T, D); between the halves it holds d(att), the attention backward's dout
  real* dk_pre;  // (B, Hkv, T, D)
  uint16_t* dh16 = nullptr;  // (N, 2F) dh in bf16, where the products read bf16 weights (w16)
};

// RoPE angles of positions pos0 .. pos0 + T - 1: cos, sin (T, D/2), angle (pos, i) = pos * theta^(-2i / D).
// The model's table and the decoder's per-position angles both come from here (bit-identical).
template <class real>
void rope_angles(real* cos, real* sin, int pos0, int T, int D, double theta);

// rmsnorm -> qkv -> split heads -> qk-norm -> RoPE: fills ln1, rstd1, qkv, q_pre, k_pre, rstd_q, rstd_k, q, k, v.
// rope_cos, rope_sin (T, D/2): the angles of the T positions. With w16 (a bf16 backend's weights, rounded once), the
// products read w16's matrices instead of w's (all four halves, forward and backward).
template <class real>
void layer_forward_pre_attention(const Backend<real>& be, const LayerActs<real>& a, const LayerWeights<real>& w,
                                 const ModelConfig& m, int B, int T, const real* rope_cos, const real* rope_sin,
                                 const LayerWeights16* w16 = nullptr);
// merge heads -> o_proj -> + x -> rmsnorm -> gate_up -> swiglu -> down -> + xa: reads att, fills merged, xa,
// rstd2, ln2, h, act, x_out.
template <class real>
void layer_forward_post_attention(const Backend<real>& be, const LayerActs<real>& a, const LayerWeights<real>& w,
                                  const ModelConfig& m, int B, int T, const LayerWeights16* w16 = nullptr);
// Backward of the post-attention part: from d.dres = d(x_out), accumulates the MLP's, ln2's and o_proj's
// gradients into g, adds the MLP branch to d.dres (now d(xa)) and leaves d(att) in d.dq_pre.
template <class real>
void layer_backward_post_attention(const Backend<real>& be, const BackwardScratch<real>& d, const LayerWeights<real>& g,
                                   const LayerActs<real>& a, const LayerWeights<real>& w, const ModelConfig& m, int B,
                                   int T, const LayerWeights16* w16 = nullptr);
// Backward of the pre-attention part: from d.dq, d.dk, d.dv (the attention backward's), accumulates the qk-norms',
// wqkv's and ln1's gradients into g and adds the attention branch to d.dres (now d(x)).
template <class real>
void layer_backward_pre_attention(const Backend<real>& be, const BackwardScratch<real>& d, const LayerWeights<real>& g,
                                  const LayerActs<real>& a, const LayerWeights<real>& w, const ModelConfig& m, int B,
                                  int T, const real* rope_cos, const real* rope_sin,
                                  const LayerWeights16* w16 = nullptr);

// out (N, OC) = inp (N, C) w^T, reading w's bf16 copy w16 where the caller keeps one (matmul_forward_bf16w), else w.
template <class real>
void weight_product(const Backend<real>& be, real* out, const real* inp, const real* w, const uint16_t* w16, int N,
                    int C, int OC);
// Its backward (dinp may be null), reading w16 where given (matmul_backward_bf16w), else w.
template <class real>
void weight_product_backward(const Backend<real>& be, real* dinp, real* dw, const real* dout, const real* inp,
                             const real* w, const uint16_t* w16, int N, int C, int OC);

}  // namespace aah
