#include "model/model.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"
#include "kernels/backend.h"
#include "kernels/bf16/bf16.h"

namespace aah {

template <class real>
void Model<real>::build_tensor_table() {
  const ModelConfig& m = cfg_;
  const int64_t C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads,
                Hkv = m.num_key_value_heads, D = m.head_dim, F = m.intermediate_size, V = m.vocab_size;
  const int64_t QKV = (H + 2 * Hkv) * D;
  // Stacked blocks in the flat buffer, in this order; each HF tensor is a contiguous slice of one of them.
  size_t off = 0;
  auto block = [&](int64_t n) {
    size_t o = off;
    off += n;
    return o;
  };
  const size_t embed = block(V * C), ln1 = block(L * C), wqkv = block(L * QKV * C), qn = block(L * D),
               kn = block(L * D), wo = block(L * C * H * D), ln2 = block(L * C), wgu = block(L * 2 * F * C),
               wdown = block(L * C * F), normf = block(C);
  const size_t lm = m.tie_word_embeddings ? embed : block(V * C);
  num_params_ = off;
  block_offsets_ = {embed, ln1, wqkv, qn, kn, wo, ln2, wgu, wdown, normf, lm};

  auto add = [&](std::string name, size_t offset, std::vector<int64_t> shape, bool decay) {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    tensors_.push_back({std::move(name), offset, n, std::move(shape), decay});
  };
  add("model.embed_tokens.weight", embed, {V, C}, true);
  for (int64_t l = 0; l < L; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const size_t q0 = wqkv + l * QKV * C;
    add(p + "input_layernorm.weight", ln1 + l * C, {C}, false);
    add(p + "self_attn.q_proj.weight", q0, {H * D, C}, true);
    add(p + "self_attn.k_proj.weight", q0 + H * D * C, {Hkv * D, C}, true);
    add(p + "self_attn.v_proj.weight", q0 + (H + Hkv) * D * C, {Hkv * D, C}, true);
    add(p + "self_attn.q_norm.weight", qn + l * D, {D}, false);
    add(p + "self_attn.k_norm.weight", kn + l * D, {D}, false);
    add(p + "self_attn.o_proj.weight", wo + l * C * H * D, {C, H * D}, true);
    add(p + "post_attention_layernorm.weight", ln2 + l * C, {C}, false);
    add(p + "mlp.gate_proj.weight", wgu + l * 2 * F * C, {F, C}, true);
    add(p + "mlp.up_proj.weight", wgu + l * 2 * F * C + F * C, {F, C}, true);
    add(p + "mlp.down_proj.weight", wdown + l * C * F, {C, F}, true);
  }
  add("model.norm.weight", normf, {C}, false);
  if (!m.tie_word_embeddings) add("lm_head.weight", lm, {V, C}, true);
}

template <class real>
static void point_params(Params<real>& p, real* base, const std::vector<size_t>& o, const ModelConfig& m) {
  p.embed = base + o[0];
  p.ln1 = base + o[1];
  p.wqkv = base + o[2];
  p.q_norm = base + o[3];
  p.k_norm = base + o[4];
  p.wo = base + o[5];
  p.ln2 = base + o[6];
  p.w_gate_up = base + o[7];
  p.w_down = base + o[8];
  p.norm_f = base + o[9];
  p.lm_head = base + o[10];
  p.C = m.hidden_size, p.QKV = size_t(m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim;
  p.D = m.head_dim, p.HD = size_t(m.num_attention_heads) * m.head_dim, p.F = m.intermediate_size;
}

// Every activation buffer of a model built for (max_B, max_T), planned as one allocation.
template <class real>
static void plan_activations(ArenaPlan<real>& plan, Activations<real>& a, const ModelConfig& cfg, int max_B,
                             int max_T, bool with_grads) {
  const size_t B = max_B, T = max_T, N = B * T, C = cfg.hidden_size, L = cfg.num_hidden_layers,
               H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, D = cfg.head_dim,
               F = cfg.intermediate_size, V = cfg.vocab_size, QKV = (H + 2 * Hkv) * D;
  a.C = C, a.H = H, a.Hkv = Hkv, a.D = D, a.F = F;
  plan.add(&a.x, (L + 1) * N * C);
  plan.add(&a.lnf, N * C);
  plan.add(&a.rstdf, N);
  plan.add(&a.logits, std::min<size_t>(N, Model<real>::kLogitRows) * V);
  plan.add(&a.losses, N);
  plan.add(&a.qkv, N * QKV);
  plan.add(&a.dln, N * C);  // d(final norm output) from the chunked LM head, then per-layer scratch
  plan.add(&a.merged, N * H * D);
  // Kept for backward only when training; inference reuses layer 0's slot for every layer.
  const size_t Lk = with_grads ? L : 1;
  plan.add(&a.xa, Lk * N * C);
  plan.add(&a.ln1, Lk * N * C);
  plan.add(&a.rstd1, Lk * N);
  plan.add(&a.q_pre, Lk * N * H * D);
  plan.add(&a.k_pre, Lk * N * Hkv * D);
  plan.add(&a.rstd_q, Lk * N * H);
  plan.add(&a.rstd_k, Lk * N * Hkv);
  plan.add(&a.q, Lk * N * H * D);
  plan.add(&a.k, Lk * N * Hkv * D);
  plan.add(&a.v, Lk * N * Hkv * D);
  plan.add(&a.att, Lk * N * H * D);
  plan.add(&a.lse, Lk * N * H);
  plan.add(&a.ln2, Lk * N * C);
  plan.add(&a.rstd2, Lk * N);
  plan.add(&a.h, Lk * N * 2 * F);
  plan.add(&a.act, Lk * N * F);
  if (with_grads) {
    plan.add(&a.dres, N * C);
    plan.add(&a.dtmp, N * C);
    plan.add(&a.dact, N * F);
    plan.add(&a.dh, N * 2 * F);
    plan.add(&a.dq, N * H * D);
    plan.add(&a.dk, N * Hkv * D);
    plan.add(&a.dv, N * Hkv * D);
    plan.add(&a.dq_pre, N * H * D);
    plan.add(&a.dk_pre, N * Hkv * D);
  }
}

template <class real>
size_t Model<real>::estimate_bytes(const ModelConfig& cfg, int max_B, int max_T, bool with_grads, bool bf16) {
  ArenaPlan<real> plan;
  Activations<real> a{};
  plan_activations(plan, a, cfg, max_B, max_T, with_grads);
  Model<real> probe_table(cfg);  // parameter count only
  const size_t params = probe_table.num_params_;
  size_t halves = 0;  // bf16 values: the weights' copy (w16_); in training the LM head's and SwiGLU's gradients
  if (bf16)
    halves = Weights16::elements(cfg) + (with_grads ? size_t(kLogitRows) * cfg.vocab_size +
                                                          size_t(max_B) * max_T * 2 * size_t(cfg.intermediate_size)
                                                    : 0);
  return (plan.total() + params * (with_grads ? 2 : 1)) * sizeof(real) + halves * sizeof(uint16_t);
}

template <class real>
Model<real>::Model(const ModelConfig& cfg, int max_B, int max_T, bool with_grads, const Backend<real>& be)
    : backend(&be), cfg_(cfg), max_B_(max_B), max_T_(max_T), memory_(&be.memory) {
  AAH_CHECK(!be.bf16 || be.memory.host, "backend ", be.name, ": bf16 weights are rounded on the host");
  build_tensor_table();
  params_ = DeviceBuffer<real>(*memory_, num_params_);
  point_params(p_, params_.data, block_offsets_, cfg);
  if (with_grads) {
    grads_ = DeviceBuffer<real>(*memory_, num_params_);
    point_params(g_, grads_.data, block_offsets_, cfg);
  }
  ArenaPlan<real> plan;
  plan_activations(plan, a_, cfg, max_B, max_T, with_grads);
  keep_per_layer_ = with_grads;
  acts_ = DeviceBuffer<real>(*memory_, plan.total());
  plan.place(acts_.data);
  if (!memory_->host) losses_host_.resize(size_t(max_B) * max_T);
  const size_t half = size_t(cfg.head_dim / 2);
  std::vector<real> cos(size_t(max_T) * half), sin(size_t(max_T) * half);
  rope_angles(cos.data(), sin.data(), 0, max_T, cfg.head_dim, cfg.rope_theta);
  rope_cos_ = DeviceBuffer<real>(*memory_, cos.size());
  rope_sin_ = DeviceBuffer<real>(*memory_, sin.size());
  memory_->upload(rope_cos_.data, cos.data(), cos.size() * sizeof(real));
  memory_->upload(rope_sin_.data, sin.data(), sin.size() * sizeof(real));
  set_full_windows(max_T);
  clamped_.resize(cfg.num_attention_heads);
}

template <class real>
Model<real>::Model(const ModelConfig& cfg)
    : backend(&backend_default<real>()), cfg_(cfg), max_B_(0), max_T_(0), memory_(&backend->memory) {
  build_tensor_table();
}

template <class real>
void Model<real>::set_full_windows(int T) {
  windows_.assign(size_t(cfg_.num_hidden_layers) * cfg_.num_attention_heads, T);
}

template <class real>
void Model<real>::init_weights(uint64_t seed) {
  Rng rng(seed);
  const double out_scale = 1.0 / std::sqrt(2.0 * cfg_.num_hidden_layers);
  HostStage<real> params(*memory_, params_.data, num_params_);
  for (const ParamTensor& t : tensors_) {
    real* w = params.data() + t.offset;
    if (t.shape.size() == 1) {
      for (size_t i = 0; i < t.numel; i++) w[i] = 1;
      continue;
    }
    const bool is_output = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    const double std = 0.02 * (is_output ? out_scale : 1.0);
    for (size_t i = 0; i < t.numel; i++) w[i] = real(std * rng.normal());
  }
  params.commit();
}

template <class real>
void Model<real>::zero_grads() {
  if (grads_.data) memory_->zero(grads_.data, num_params_ * sizeof(real));
}

template <class real>
void Model<real>::check_memory() const {
  AAH_CHECK(backend->memory.alloc == memory_->alloc, "backend ", backend->name,
            " does not use the memory the model's buffers were allocated in: build the model with it");
}

template <class real>
const int* Model<real>::clamped_windows(int l, int T) {
  const int H = cfg_.num_attention_heads;
  const int* win = windows_.data() + size_t(l) * H;
  for (int h = 0; h < H; h++) clamped_[h] = std::max(1, std::min(win[h], T));  // windows never exceed the sequence
  return clamped_.data();
}

template <class real>
void Model<real>::layer_forward(int l, int B, int T) {
  const int H = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim;
  const LayerActs<real> a = a_.layer(l, keep_per_layer_ ? l : 0, B * T);
  const LayerWeights<real> w = p_.layer(l);
  layer_forward_pre_attention(*backend, a, w, cfg_, B, T, rope_cos_.data, rope_sin_.data, layer16(l));
  if (before_attention) {  // the hook reads q, k, v on the host
    const real *q = a.q, *k = a.k, *v = a.v;
    if (!memory_->host) {
      const size_t nq = size_t(B) * T * H * D, nk = size_t(B) * T * Hkv * D;
      qkv_host_.resize(nq + 2 * nk);
      memory_->download(qkv_host_.data(), a.q, nq * sizeof(real));
      memory_->download(qkv_host_.data() + nq, a.k, nk * sizeof(real));
      memory_->download(qkv_host_.data() + nq + nk, a.v, nk * sizeof(real));
      q = qkv_host_.data(), k = q + nq, v = k + nk;
    }
    before_attention(l, q, k, v, B, T, windows_.data() + size_t(l) * H);
  }
  AttnDiagnostics diag;
  AttnDiagnostics* diag_ptr = nullptr;
  if (diag_entropy || diag_out_norm || diag_usage) {
    diag.entropy = diag_entropy ? diag_entropy + size_t(l) * H : nullptr;
    diag.out_norm = diag_out_norm ? diag_out_norm + size_t(l) * H : nullptr;
    diag.usage = diag_usage ? diag_usage + size_t(l) * H : nullptr;
    diag_ptr = &diag;
  }
  const int* win = clamped_windows(l, T);
  const double t_attn = now_seconds();
  backend->attention_forward(a.att, a.lse, a.q, a.k, a.v, win, B, H, Hkv, T, D, diag_ptr, &counters);
  attention_seconds += now_seconds() - t_attn;
  layer_forward_post_attention(*backend, a, w, cfg_, B, T, layer16(l));
}

template <class real>
void Model<real>::forward_trunk(const int32_t* tokens, int B, int T) {
  AAH_CHECK(B <= max_B_ && T <= max_T_, "micro-batch (", B, ", ", T, ") exceeds the model's (", max_B_, ", ",
            max_T_, ")");
  check_memory();
  const int N = B * T, C = cfg_.hidden_size, L = cfg_.num_hidden_layers;
  if constexpr (std::is_same_v<real, float>)  // the weights may have changed since the last forward, unless told
    if (backend->bf16 && !(keep_w16_ && !w16_.empty())) w16_.round(p_, cfg_);
  keep_w16_ = false;
  backend->embedding_forward(a_.x, tokens, p_.embed, N, C);
  forward_tokens = tokens;
  for (int l = 0; l < L; l++) layer_forward(l, B, T);
  forward_tokens = nullptr;
  backend->rmsnorm_forward(a_.lnf, a_.rstdf, a_.x + size_t(L) * N * C, p_.norm_f, N, C, float(cfg_.rms_norm_eps));
}

template <class real>
void Model<real>::forward_logits(const int32_t* tokens, int B, int T, real* logits) {
  forward_trunk(tokens, B, T);
  weight_product(*backend, logits, a_.lnf, p_.lm_head, lm_head16(), B * T, cfg_.hidden_size, cfg_.vocab_size);
  have_head_grad_ = false;
}

template <class real>
double Model<real>::forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale) {
  AAH_CHECK(targets, "forward needs targets");
  forward_trunk(tokens, B, T);
  const int N = B * T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  Params<real>& p = p_;
  Activations<real>& a = a_;
  have_head_grad_ = grad_scale != 0;
  double sum = 0;
  for (int r0 = 0; r0 < N; r0 += kLogitRows) {
    const int rows = std::min(kLogitRows, N - r0);
    const real* lnf = a.lnf + size_t(r0) * C;
    weight_product(*backend, a.logits, lnf, p.lm_head, lm_head16(), rows, C, V);
    if (have_head_grad_ && backend->bf16) {  // the gradient written in bf16 at once, the operand the products read
      dlogits16_.resize(size_t(kLogitRows) * V);
      backend->crossentropy_forward_backward_bf16(a.losses + r0, dlogits16_.data(), a.logits, targets + r0, rows, V,
                                                  grad_scale);
      backend->matmul_backward_bf16(a.dln + size_t(r0) * C, g_.lm_head, dlogits16_.data(), lnf, lm_head16(), rows, C,
                                    V);
    } else {
      backend->crossentropy_forward_backward(a.losses + r0, have_head_grad_ ? a.logits : (real*)nullptr, a.logits,
                                             targets + r0, rows, V, grad_scale);
      if (have_head_grad_)
        backend->matmul_backward(a.dln + size_t(r0) * C, g_.lm_head, a.logits, lnf, p.lm_head, rows, C, V);
    }
    if (!memory_->host) memory_->download(losses_host_.data() + r0, a.losses + r0, size_t(rows) * sizeof(real));
    const real* losses = this->losses();
    for (int i = 0; i < rows; i++) sum += losses[r0 + i];
  }
  return sum / N;
}

template <class real>
void Model<real>::layer_backward(int l, int B, int T) {
  const int H = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim;
  const LayerActs<real> a = a_.layer(l, l, B * T);
  const LayerWeights<real> w = p_.layer(l), g = g_.layer(l);
  BackwardScratch<real> d = a_.scratch();
  if (backend->bf16) {
    dh16_.resize(size_t(B) * T * 2 * cfg_.intermediate_size);
    d.dh16 = dh16_.data();
  }
  layer_backward_post_attention(*backend, d, g, a, w, cfg_, B, T, layer16(l));
  const int* win = clamped_windows(l, T);
  const double t_attn = now_seconds();
  backend->attention_backward(d.dq, d.dk, d.dv, d.dq_pre, a.att, a.lse, a.q, a.k, a.v, win, B, H, Hkv, T, D, &counters);
  attention_seconds += now_seconds() - t_attn;
  layer_backward_pre_attention(*backend, d, g, a, w, cfg_, B, T, rope_cos_.data, rope_sin_.data, layer16(l));
}

template <class real>
void Model<real>::backward(const int32_t* tokens, int B, int T) {
  AAH_CHECK(grads_.data && keep_per_layer_, "backward needs a model built with gradients");
  AAH_CHECK(have_head_grad_, "backward needs a forward with grad_scale != 0");
  check_memory();
  const int N = B * T, C = cfg_.hidden_size, L = cfg_.num_hidden_layers;
  // a_.dln holds d(final norm output), from the LM head in forward
  backend->rmsnorm_backward(a_.dres, g_.norm_f, a_.dln, a_.x + size_t(L) * N * C, p_.norm_f, a_.rstdf, N, C);
  if (after_layer_backward) after_layer_backward(L);
  for (int l = L - 1; l >= 0; l--) {
    layer_backward(l, B, T);
    if (after_layer_backward) after_layer_backward(l);
  }
  backend->embedding_backward(g_.embed, a_.dres, tokens, N, C);
  if (after_layer_backward) after_layer_backward(-1);
}

size_t Weights16::elements(const ModelConfig& m) {
  const size_t C = m.hidden_size, HD = size_t(m.num_attention_heads) * m.head_dim,
               QKV = HD + 2 * size_t(m.num_key_value_heads) * m.head_dim, F = m.intermediate_size;
  return (QKV * C + C * HD + 2 * F * C + C * F) * m.num_hidden_layers + size_t(m.vocab_size) * C;
}

void Weights16::round(const Params<float>& p, const ModelConfig& m) {
  const size_t L = m.num_hidden_layers, C = p.C;
  auto rounded = [](std::vector<uint16_t>& out, const float* w, size_t n) {
    out.resize(n);
    bf16::convert(out.data(), w, n);
    return out.data();
  };
  const uint16_t* qkv = rounded(wqkv, p.wqkv, L * p.QKV * C);
  const uint16_t* o = rounded(wo, p.wo, L * C * p.HD);
  const uint16_t* gu = rounded(w_gate_up, p.w_gate_up, L * 2 * p.F * C);
  const uint16_t* down = rounded(w_down, p.w_down, L * C * p.F);
  rounded(lm_head, p.lm_head, size_t(m.vocab_size) * C);
  layers.resize(L);
  for (size_t l = 0; l < L; l++)
    layers[l] = {.wqkv = qkv + l * p.QKV * C,
                 .wo = o + l * C * p.HD,
                 .w_gate_up = gu + l * 2 * p.F * C,
                 .w_down = down + l * C * p.F};
}

template class Model<float>;
template class Model<double>;

}  // namespace aah
