// The Qwen3-style decoder, written once as a template on its element type: Model<float> runs the fast kernels,
// Model<double> the scalar references (for gradient checks). Straight-line forward and backward, like llm.c.
//
// B batch, T positions, N = B*T, C hidden, L layers, H query heads, Hkv key/value heads, D head dim,
// F intermediate size, V vocabulary, QKV = (H + 2 Hkv) D.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/layer.h"

namespace aah {

// One Hugging Face tensor as a slice of the flat parameter buffer.
struct ParamTensor {
  std::string name;            // e.g. "model.layers.3.self_attn.q_proj.weight"
  size_t offset = 0, numel = 0;
  std::vector<int64_t> shape;
  bool decay = false;          // AdamW weight decay applies (matrices only)
};

// All parameters live in one allocation; these point into it. Per-layer tensors are stacked over L.
template <class real>
struct Params {
  real* embed;      // (V, C)
  real* ln1;        // (L, C)    input_layernorm
  real* wqkv;       // (L, QKV, C) rows: q_proj (H D), k_proj (Hkv D), v_proj (Hkv D)
  real* q_norm;     // (L, D)
  real* k_norm;     // (L, D)
  real* wo;         // (L, C, H D)
  real* ln2;        // (L, C)    post_attention_layernorm
  real* w_gate_up;  // (L, 2F, C) rows: gate_proj (F), up_proj (F)
  real* w_down;     // (L, C, F)
  real* norm_f;     // (C)
  real* lm_head;    // (V, C), equal to embed when tied
  size_t C, QKV, D, HD, F;  // per-layer sizes (HD = H D), for layer()

  // Layer l's slice of every stacked tensor.
  LayerWeights<real> layer(int l) const {
    const size_t i = size_t(l);
    return {.ln1 = ln1 + i * C,
            .wqkv = wqkv + i * QKV * C,
            .q_norm = q_norm + i * D,
            .k_norm = k_norm + i * D,
            .wo = wo + i * C * HD,
            .ln2 = ln2 + i * C,
            .w_gate_up = w_gate_up + i * 2 * F * C,
            .w_down = w_down + i * C * F};
  }
};

// Every weight matrix rounded to bf16, in Params' stacked layouts, for a bf16 backend's products (matmul_forward_bf16w
// and matmul_backward_bf16w read these instead of rounding the fp32 weights at each call). The model rounds them at
// the start of each forward (but a step's later micro-batches: keep_rounded_weights), so a training step rounds its
// weights once, not once per product; the decoder once, at construction.
struct Weights16 {
  std::vector<uint16_t> wqkv, wo, w_gate_up, w_down, lm_head;
  std::vector<LayerWeights16> layers;  // (L) each layer's slices of the above

  void round(const Params<float>& p, const ModelConfig& m);
  bool empty() const { return lm_head.empty(); }
  // Elements of all matrices (the LM head included) of a model with configuration m.
  static size_t elements(const ModelConfig& m);
};

// Activations kept for backward, each sized for the largest (B, T) the model was built for.
template <class real>
struct Activations {
  real* x;       // (L + 1, N, C) residual stream entering each layer, and after the last
  real* xa;      // (L, N, C) residual after the attention half
  real* ln1;     // (L, N, C)
  real* rstd1;   // (L, N)
  real* q_pre;   // (L, B, H, T, D) before QK-norm
  real* k_pre;   // (L, B, Hkv, T, D)
  real* rstd_q;  // (L, B H T)
  real* rstd_k;  // (L, B Hkv T)
  real* q;       // (L, B, H, T, D) after QK-norm and RoPE
  real* k;       // (L, B, Hkv, T, D)
  real* v;       // (L, B, Hkv, T, D)
  real* att;     // (L, B, H, T, D) attention output per head
  real* lse;     // (L, B, H, T)
  real* ln2;     // (L, N, C)
  real* rstd2;   // (L, N)
  real* h;       // (L, N, 2F) gate | up
  real* act;     // (L, N, F) silu(gate) * up
  real* lnf;     // (N, C)
  real* rstdf;   // (N)
  real* logits;  // (min(N, kLogitRows), V): one chunk of rows at a time, overwritten by its gradient
  real* losses;  // (N)
  // scratch shared by all layers
  real* qkv;     // (N, QKV)  projection output / its gradient
  real* merged;  // (N, H D)  heads concatenated / its gradient
  real* dres;    // (N, C)    gradient of the residual stream
  real* dtmp;    // (N, C)
  real* dln;     // (N, C)
  real* dact;    // (N, F)
  real* dh;      // (N, 2F)
  real* dq;      // (B, H, T, D)
  real* dk;      // (B, Hkv, T, D)
  real* dv;      // (B, Hkv, T, D)
  real* dq_pre;  // (B, H, T, D)
  real* dk_pre;  // (B, Hkv, T, D)
  size_t C, H, Hkv, D, F;  // for layer()

  // Layer l's view for a micro-batch of N rows: the residual stream x at layer l (and l + 1 as x_out), everything
  // else in activation slot `slot` (l when training, 0 when inference reuses one slot for every layer).
  LayerActs<real> layer(int l, int slot, int N) const {
    const size_t n = size_t(N), s = size_t(slot) * n;  // s: the slot's first row
    return {.x = x + size_t(l) * n * C,
            .ln1 = ln1 + s * C,
            .rstd1 = rstd1 + s,
            .qkv = qkv,
            .q_pre = q_pre + s * H * D,
            .k_pre = k_pre + s * Hkv * D,
            .rstd_q = rstd_q + s * H,
            .rstd_k = rstd_k + s * Hkv,
            .q = q + s * H * D,
            .k = k + s * Hkv * D,
            .v = v + s * Hkv * D,
            .att = att + s * H * D,
            .lse = lse + s * H,
            .merged = merged,
            .xa = xa + s * C,
            .ln2 = ln2 + s * C,
            .rstd2 = rstd2 + s,
            .h = h + s * 2 * F,
            .act = act + s * F,
            .x_out = x + size_t(l + 1) * n * C};
  }
  BackwardScratch<real> scratch() const { return {dres, dtmp, dln, dact, dh, dq, dk, dv, dq_pre, dk_pre}; }
};

template <class real>
class Model {
 public:
  // Allocates parameters, gradients and activations for micro-batches of up to (max_B, max_T), once, in the memory
  // of `backend` (kernels/backend.h: Memory; host memory for the CPU backends). Owns them (RAII): a throw part-way
  // leaks nothing.
  Model(const ModelConfig& cfg, int max_B, int max_T, bool with_grads = true,
        const Backend<real>& backend = backend_default<real>());
  // Bytes the constructor would allocate (parameters, gradients, activations), without allocating; with bf16, also
  // what a bf16 backend's forward and backward add (the bf16 copy of the weights, the two gradients kept in bf16).
  static size_t estimate_bytes(const ModelConfig& cfg, int max_B, int max_T, bool with_grads = true, bool bf16 = false);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t num_params() const { return num_params_; }
  // The buffers, in the backend's memory: read or write them on the host through HostCopy / HostStage
  // (kernels/backend.h), or in place where backend->memory.host.
  real* params_data() { return params_.data; }
  real* grads_data() { return grads_.data; }
  Params<real>& params() { return p_; }
  Params<real>& grads() { return g_; }

  // normal(0, 0.02) matrices, output projections (o_proj, down_proj) scaled by 1/sqrt(2L), norms = 1.
  void init_weights(uint64_t seed);

  // Windows in force, one per (layer, head); full (T) by default. Set by the window policy.
  std::vector<int>& windows() { return windows_; }
  void set_full_windows(int T);
  // The kernels (kernels/backend.h): local for float (backend_for(cfg.aah.attention, cfg.train.precision) picks the
  // run's), the reference for double. Another backend may be set after construction if it shares the memory that
  // allocated the buffers (every CPU backend's: host memory); forward and backward check.
  const Backend<real>* backend;
  AttnCounters counters;         // attention work, accumulated over calls
  double attention_seconds = 0;  // wall time inside the attention kernels, accumulated
  // Called in each layer after q, k (normed, rotated) and v exist (on the host: copies where the backend's memory is
  // not the host's) and before attention, so a window policy can set
  // this layer's windows (H values, in place) from the batch's own activations: the AAH controller does this on
  // its update steps, and the new windows apply to that same forward (spec section 5).
  std::function<void(int layer, const real* q, const real* k, const real* v, int B, int T, int* windows)>
      before_attention;
  // The tokens (B, T) of the forward in progress, for before_attention (the copy-use policy reads them); null outside.
  const int32_t* forward_tokens = nullptr;
  // When set, backward() calls it as parameter gradients become final: after_layer_backward(L) once the final
  // norm's (and the LM head's) are, then (l) after layer l (l = L-1 .. 0), then (-1) after the embedding's. Lets
  // data-parallel training start all-reducing a layer's gradients while the layers below still run backward.
  std::function<void(int layer)> after_layer_backward;
  // When non-null, the forward fills per-layer diagnostics (L x H each) for the controller.
  double* diag_entropy = nullptr;
  double* diag_out_norm = nullptr;
  double* diag_usage = nullptr;

  // Forward over tokens (B, T) with next-token targets; returns the mean loss (per-position losses are left in
  // losses()). The LM head and the loss run over chunks of kLogitRows rows, so the (N, V) logits never exist
  // at once; when grad_scale != 0 each chunk's gradient (scaled by grad_scale) is also pushed through the LM head
  // right away, accumulating the LM-head gradient and leaving d(final norm output) for backward().
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale = 0);
  static constexpr int kLogitRows = 512;
  // Forward over tokens (B, T) up to the final norm; returns its output (B*T, C) (valid until the next forward).
  const real* forward_hidden(const int32_t* tokens, int B, int T) {
    forward_trunk(tokens, B, T);
    return a_.lnf;
  }
  // Forward over tokens (B, T) writing every position's logits into `logits` (B*T, V): inference and tests.
  void forward_logits(const int32_t* tokens, int B, int T, real* logits);
  int max_batch() const { return max_B_; }
  int max_context() const { return max_T_; }
  // Backward of the last forward; accumulates (+=) parameter gradients.
  void backward(const int32_t* tokens, int B, int T);
  void zero_grads();
  // The weights have not changed since the last forward: the next forward may reuse the bf16 copy that forward
  // rounded (a bf16 backend; no effect otherwise). train_step says so for every micro-batch after a step's first,
  // so a step rounds its weights once whatever train.grad_accum. Applies to the next forward only.
  void keep_rounded_weights() { keep_w16_ = true; }

  const Activations<real>& acts() const { return a_; }
  // The last forward's per-position losses (B, T), on the host.
  const real* losses() const { return memory_->host ? a_.losses : losses_host_.data(); }

 private:
  explicit Model(const ModelConfig& cfg);  // the tensor table only (estimate_bytes)
  void build_tensor_table();
  void forward_trunk(const int32_t* tokens, int B, int T);  // embedding .. final norm (into acts().lnf)
  void check_memory() const;                                // the backend in force uses the memory the buffers are in
  // Layer l over (B, T): pre-attention, the window policy's hook, attention (through the backend), the rest.
  void layer_forward(int l, int B, int T);
  // Its backward: d(layer output) in acts().dres becomes d(layer input); accumulates layer l's gradients.
  void layer_backward(int l, int B, int T);
  const int* clamped_windows(int l, int T);  // layer l's windows, each clamped to [1, T]

  ModelConfig cfg_;
  int max_B_, max_T_;
  std::vector<ParamTensor> tensors_;
  size_t num_params_ = 0;
  const Memory* memory_ = nullptr;     // the memory the buffers below are in: backend->memory at construction
  DeviceBuffer<real> params_, grads_;  // (num_params) each; grads_ empty without gradients
  DeviceBuffer<real> acts_;            // every activation buffer, one allocation
  std::vector<real> losses_host_;      // (max_B max_T) losses() where the memory is not the host's
  std::vector<real> qkv_host_;         // a layer's q, k, v for before_attention, where the memory is not the host's
  Params<real> p_{}, g_{};
  Activations<real> a_{};
  DeviceBuffer<real> rope_cos_, rope_sin_;  // (max_T, D/2)
  std::vector<int> windows_;           // (L, H)
  std::vector<int> clamped_;           // (H) scratch of clamped_windows
  std::vector<size_t> block_offsets_;  // start of each stacked parameter block
  bool keep_per_layer_ = true;         // activations kept per layer (training) or one slot reused (inference)
  bool have_head_grad_ = false;        // the last forward ran the LM head backward (grad_scale != 0)
  Weights16 w16_;                      // the weights in bf16, rounded at each forward when backend->bf16
  bool keep_w16_ = false;              // keep_rounded_weights() was called since the last forward
  std::vector<uint16_t> dlogits16_;    // (kLogitRows, V) the LM head's gradient in bf16, when backend->bf16
  std::vector<uint16_t> dh16_;         // (N, 2F) SwiGLU's input gradient in bf16, when backend->bf16
  // Layer l's bf16 matrices, which its products read, when the backend is bf16; else null (the fp32 ones).
  const LayerWeights16* layer16(int l) const { return backend->bf16 ? &w16_.layers[size_t(l)] : nullptr; }
  const uint16_t* lm_head16() const { return backend->bf16 ? w16_.lm_head.data() : nullptr; }
};

extern template class Model<float>;
extern template class Model<double>;

}  // namespace aah
