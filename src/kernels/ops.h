// The kernel interface: every op of the model as a forward/backward pair of free functions, outputs first.
// Parameter gradients accumulate with +=, activation gradients are written with =.
//
// Shape legend: B batch, T positions, N = B*T rows, C channels (hidden_size), H query heads, Hkv key/value
// heads, D head dim, F intermediate size, V vocabulary size, OC output channels.
//
// Each op has two implementations: cpu:: (float, the fast path, kernels/cpu/) and ref:: (a plain scalar template
// for float and double, kernels/ref/, the specification the fast path is tested against). The model reaches them
// through the backend table (kernels/backend.h), never directly: Model<float> runs the cpu backend, Model<double>
// the reference used by gradient checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/attention_common.h"

namespace aah {

// One AdamW update's scalars (train/optimizer.h): c1, c2 the bias corrections of this update, grad_scale applied to
// each gradient first.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale;
};

namespace cpu {
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C);
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C);
// out (N, OC) = inp (N, C) @ w^T, w stored (OC, C) as in torch.nn.Linear.
void matmul_forward(float* out, const float* inp, const float* w, int N, int C, int OC);
// dinp (N, C) = dout @ w (written, skipped when nullptr); dw (OC, C) += dout^T @ inp.
void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C,
                     int OC);
// qkv (B, T, (H + 2 Hkv) D) -> q (B, H, T, D), k (B, Hkv, T, D), v (B, Hkv, T, D)
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int T, int H, int Hkv, int D);
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B, int T, int H,
                        int Hkv, int D);
// inp (B, H, T, D) -> out (B, T, H D)
void heads_merge_forward(float* out, const float* inp, int B, int H, int T, int D);
void heads_merge_backward(float* dinp, const float* dout, int B, int H, int T, int D);
// In place on x (BH, T, D); cos, sin (T, D/2). HF "rotate half": out = x cos + rotate_half(x) sin.
void rope_forward(float* x, const float* cos, const float* sin, int BH, int T, int D);
void rope_backward(float* dx, const float* cos, const float* sin, int BH, int T, int D);
// h (N, 2F) = [gate | up]; out (N, F) = silu(gate) * up
void swiglu_forward(float* out, const float* h, int N, int F);
void swiglu_backward(float* dh, const float* dout, const float* h, int N, int F);
// Softmax cross-entropy over logits (N, V). losses (N) gets -log p[target]. When dlogits is non-null it receives
// (softmax - onehot(target)) * dscale (may alias logits).
void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                   int N, int V, float dscale);

// e[j] *= scale for j < n; returns the largest of them (the controller's softmax rows, controller/coverage.h).
float scale_max(float* e, int n, float scale);

// The training step's remainder (kernels/backend.h): y += x; the sum of squares in double over 64 fixed chunks;
// AdamW's update (train/optimizer.h).
void residual_add(float* y, const float* x, size_t n);
double sum_squares(const float* x, size_t n);
void adamw_update(float* params, float* m, float* v, const uint8_t* decay, const float* grads, size_t n,
                  const AdamWStep& s);

// Causal attention with one window per head. q (B, H, T, D), k v (B, Hkv, T, D), window (H), W >= 1;
// out (B, H, T, D), lse (B, H, T) the row log-sum-exp of the scaled scores. Scale 1/sqrt(D).
// Query head h reads key/value head h / (H / Hkv).
void attn_local_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters);
void attn_local_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters);
// The paper's execution, for comparisons: full T x T scores plus the window mask (allocates T x T scratch).
void attn_dense_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters);
void attn_dense_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters);
}  // namespace cpu

}  // namespace aah
