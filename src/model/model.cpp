#include "model/model.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"

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
static void point_params(Params<real>& p, real* base, const std::vector<size_t>& o) {
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
}

// Every activation buffer of a model built for (max_B, max_T), planned as one allocation.
template <class real>
static void plan_activations(ArenaPlan<real>& plan, Activations<real>& a, const ModelConfig& cfg, int max_B,
                             int max_T, bool with_grads) {
  const size_t B = max_B, T = max_T, N = B * T, C = cfg.hidden_size, L = cfg.num_hidden_layers,
               H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, D = cfg.head_dim,
               F = cfg.intermediate_size, V = cfg.vocab_size, QKV = (H + 2 * Hkv) * D;
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
size_t Model<real>::estimate_bytes(const ModelConfig& cfg, int max_B, int max_T, bool with_grads) {
  ArenaPlan<real> plan;
  Activations<real> a{};
  plan_activations(plan, a, cfg, max_B, max_T, with_grads);
  Model<real> probe_table(cfg);  // parameter count only
  const size_t params = probe_table.num_params_;
  return (plan.total() + params * (with_grads ? 2 : 1)) * sizeof(real);
}

template <class real>
Model<real>::Model(const ModelConfig& cfg, int max_B, int max_T, bool with_grads)
    : cfg_(cfg), max_B_(max_B), max_T_(max_T) {
  build_tensor_table();
  param_base_ = static_cast<real*>(std::aligned_alloc(64, (num_params_ * sizeof(real) + 63) / 64 * 64));
  if (!param_base_) fail("[model] out of memory for ", num_params_, " parameters");
  std::memset(param_base_, 0, num_params_ * sizeof(real));
  point_params(p_, param_base_, block_offsets_);
  if (with_grads) {
    grad_base_ = static_cast<real*>(std::aligned_alloc(64, (num_params_ * sizeof(real) + 63) / 64 * 64));
    if (!grad_base_) fail("[model] out of memory for gradients");
    std::memset(grad_base_, 0, num_params_ * sizeof(real));
    point_params(g_, grad_base_, block_offsets_);
  }

  ArenaPlan<real> plan;
  plan_activations(plan, a_, cfg, max_B, max_T, with_grads);
  keep_per_layer_ = with_grads;
  act_base_ = plan.allocate();
  compute_rope(max_T);
  set_full_windows(max_T);
}

template <class real>
Model<real>::Model(const ModelConfig& cfg) : cfg_(cfg), max_B_(0), max_T_(0) {
  build_tensor_table();
}

template <class real>
Model<real>::~Model() {
  std::free(param_base_);
  std::free(grad_base_);
  std::free(act_base_);
}

template <class real>
void Model<real>::compute_rope(int T) {
  const int half = cfg_.head_dim / 2;
  rope_cos_.resize(size_t(T) * half);
  rope_sin_.resize(size_t(T) * half);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      const double inv_freq = std::pow(cfg_.rope_theta, -2.0 * i / cfg_.head_dim);
      rope_cos_[size_t(t) * half + i] = real(std::cos(t * inv_freq));
      rope_sin_[size_t(t) * half + i] = real(std::sin(t * inv_freq));
    }
}

template <class real>
void Model<real>::set_full_windows(int T) {
  windows_.assign(size_t(cfg_.num_hidden_layers) * cfg_.num_attention_heads, T);
}

template <class real>
void Model<real>::init_weights(uint64_t seed) {
  Rng rng(seed);
  const double out_scale = 1.0 / std::sqrt(2.0 * cfg_.num_hidden_layers);
  for (const ParamTensor& t : tensors_) {
    real* w = param_base_ + t.offset;
    if (t.shape.size() == 1) {
      for (size_t i = 0; i < t.numel; i++) w[i] = 1;
      continue;
    }
    const bool is_output = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    const double std = 0.02 * (is_output ? out_scale : 1.0);
    for (size_t i = 0; i < t.numel; i++) w[i] = real(std * rng.normal());
  }
}

template <class real>
void Model<real>::zero_grads() {
  if (grad_base_) std::memset(grad_base_, 0, num_params_ * sizeof(real));
}

template <class real>
void Model<real>::forward_trunk(const int32_t* tokens, int B, int T) {
  AAH_CHECK(B <= max_B_ && T <= max_T_, "micro-batch (", B, ", ", T, ") exceeds the model's (", max_B_, ", ",
            max_T_, ")");
  const ModelConfig& m = cfg_;
  const int N = B * T, C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads,
            Hkv = m.num_key_value_heads, D = m.head_dim, F = m.intermediate_size,
            QKV = (H + 2 * Hkv) * D;
  const float eps = float(m.rms_norm_eps);
  Params<real>& p = p_;
  Activations<real>& a = a_;
  const size_t NC = size_t(N) * C, NHD = size_t(N) * H * D, NKD = size_t(N) * Hkv * D;
  const int full_T = T;

  embedding_forward(a.x, tokens, p.embed, N, C);
  for (int l = 0; l < L; l++) {
    const int s = keep_per_layer_ ? l : 0;  // activation slot of this layer
    real* x = a.x + l * NC;
    real* ln1 = a.ln1 + s * NC;
    real* q_pre = a.q_pre + s * NHD;
    real* k_pre = a.k_pre + s * NKD;
    real* q = a.q + s * NHD;
    real* k = a.k + s * NKD;
    real* v = a.v + s * NKD;
    real* att = a.att + s * NHD;
    real* lse = a.lse + size_t(s) * N * H;
    real* xa = a.xa + s * NC;
    real* ln2 = a.ln2 + s * NC;
    real* h = a.h + size_t(s) * N * 2 * F;
    real* act = a.act + size_t(s) * N * F;
    int* win = windows_.data() + size_t(l) * H;

    // attention half
    rmsnorm_forward(ln1, a.rstd1 + size_t(s) * N, x, p.ln1 + size_t(l) * C, N, C, eps);
    matmul_forward(a.qkv, ln1, p.wqkv + size_t(l) * QKV * C, N, C, QKV);
    qkv_split_forward(q_pre, k_pre, v, a.qkv, B, T, H, Hkv, D);
    if (m.qk_norm) {
      rmsnorm_forward(q, a.rstd_q + size_t(s) * N * H, q_pre, p.q_norm + size_t(l) * D, N * H, D, eps);
      rmsnorm_forward(k, a.rstd_k + size_t(s) * N * Hkv, k_pre, p.k_norm + size_t(l) * D, N * Hkv, D, eps);
    } else {
      std::memcpy(q, q_pre, NHD * sizeof(real));
      std::memcpy(k, k_pre, NKD * sizeof(real));
    }
    rope_forward(q, rope_cos_.data, rope_sin_.data, B * H, T, D);
    rope_forward(k, rope_cos_.data, rope_sin_.data, B * Hkv, T, D);
    if (before_attention) before_attention(l, q, k, v, B, T, win);
    AttnDiagnostics diag;
    AttnDiagnostics* diag_ptr = nullptr;
    if (diag_entropy || diag_out_norm || diag_usage) {
      diag.entropy = diag_entropy ? diag_entropy + size_t(l) * H : nullptr;
      diag.out_norm = diag_out_norm ? diag_out_norm + size_t(l) * H : nullptr;
      diag.usage = diag_usage ? diag_usage + size_t(l) * H : nullptr;
      diag_ptr = &diag;
    }
    std::vector<int> clamped(win, win + H);  // windows never exceed the sequence
    for (int& w : clamped) w = std::max(1, std::min(w, full_T));
    const double t_attn = now_seconds();
    if constexpr (std::is_same_v<real, float>) {
      if (dense_attention)
        cpu::attn_dense_forward(att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D, diag_ptr, &counters);
      else
        attn_local_forward(att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D, diag_ptr, &counters);
    } else {
      attn_local_forward(att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D, diag_ptr, &counters);
    }
    attention_seconds += now_seconds() - t_attn;
    heads_merge_forward(a.merged, att, B, H, T, D);
    matmul_forward(xa, a.merged, p.wo + size_t(l) * C * H * D, N, H * D, C);
    for (size_t i = 0; i < NC; i++) xa[i] += x[i];

    // MLP half
    rmsnorm_forward(ln2, a.rstd2 + size_t(s) * N, xa, p.ln2 + size_t(l) * C, N, C, eps);
    matmul_forward(h, ln2, p.w_gate_up + size_t(l) * 2 * F * C, N, C, 2 * F);
    swiglu_forward(act, h, N, F);
    real* x_next = a.x + (l + 1) * NC;
    matmul_forward(x_next, act, p.w_down + size_t(l) * C * F, N, F, C);
    for (size_t i = 0; i < NC; i++) x_next[i] += xa[i];
  }
  rmsnorm_forward(a.lnf, a.rstdf, a.x + size_t(L) * NC, p.norm_f, N, C, eps);
}

template <class real>
void Model<real>::forward_logits(const int32_t* tokens, int B, int T, real* logits) {
  forward_trunk(tokens, B, T);
  matmul_forward(logits, a_.lnf, p_.lm_head, B * T, cfg_.hidden_size, cfg_.vocab_size);
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
    matmul_forward(a.logits, lnf, p.lm_head, rows, C, V);
    crossentropy_forward_backward(a.losses + r0, have_head_grad_ ? a.logits : (real*)nullptr, a.logits,
                                  targets + r0, rows, V, grad_scale);
    if (have_head_grad_) matmul_backward(a.dln + size_t(r0) * C, g_.lm_head, a.logits, lnf, p.lm_head, rows, C, V);
    for (int i = 0; i < rows; i++) sum += a.losses[r0 + i];
  }
  return sum / N;
}

template <class real>
void Model<real>::backward(const int32_t* tokens, int B, int T) {
  AAH_CHECK(grad_base_ && keep_per_layer_, "backward needs a model built with gradients");
  const ModelConfig& m = cfg_;
  const int N = B * T, C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads,
            Hkv = m.num_key_value_heads, D = m.head_dim, F = m.intermediate_size,
            QKV = (H + 2 * Hkv) * D;
  Params<real>& p = p_;
  Params<real>& g = g_;
  Activations<real>& a = a_;
  const size_t NC = size_t(N) * C, NHD = size_t(N) * H * D, NKD = size_t(N) * Hkv * D;

  AAH_CHECK(have_head_grad_, "backward needs a forward with grad_scale != 0");
  // a.dln holds d(final norm output), from the LM head in forward
  rmsnorm_backward(a.dres, g.norm_f, a.dln, a.x + size_t(L) * NC, p.norm_f, a.rstdf, N, C);
  if (after_layer_backward) after_layer_backward(L);

  for (int l = L - 1; l >= 0; l--) {
    real* x = a.x + l * NC;
    real* xa = a.xa + l * NC;
    const int* win = windows_.data() + size_t(l) * H;

    // MLP half: x_next = xa + down(swiglu(gate_up(rmsnorm(xa))))
    matmul_backward(a.dact, g.w_down + size_t(l) * C * F, a.dres, a.act + size_t(l) * N * F,
                    p.w_down + size_t(l) * C * F, N, F, C);
    swiglu_backward(a.dh, a.dact, a.h + size_t(l) * N * 2 * F, N, F);
    matmul_backward(a.dln, g.w_gate_up + size_t(l) * 2 * F * C, a.dh, a.ln2 + l * NC,
                    p.w_gate_up + size_t(l) * 2 * F * C, N, C, 2 * F);
    rmsnorm_backward(a.dtmp, g.ln2 + size_t(l) * C, a.dln, xa, p.ln2 + size_t(l) * C, a.rstd2 + size_t(l) * N, N,
                     C);
    for (size_t i = 0; i < NC; i++) a.dres[i] += a.dtmp[i];

    // attention half: xa = x + o_proj(merge(attention(rope(norm(q)), rope(norm(k)), v)))
    real* att = a.att + l * NHD;
    heads_merge_forward(a.merged, att, B, H, T, D);  // recomputed instead of stored
    matmul_backward(a.qkv, g.wo + size_t(l) * C * H * D, a.dres, a.merged, p.wo + size_t(l) * C * H * D, N,
                    H * D, C);  // a.qkv as scratch for d(merged)
    heads_merge_backward(a.dq_pre, a.qkv, B, H, T, D);  // a.dq_pre as scratch for d(att)
    std::vector<int> clamped(win, win + H);
    for (int& w : clamped) w = std::max(1, std::min(w, T));
    real* q = a.q + l * NHD;
    real* k = a.k + l * NKD;
    real* v = a.v + l * NKD;
    real* lse = a.lse + size_t(l) * N * H;
    const double t_attn = now_seconds();
    if constexpr (std::is_same_v<real, float>) {
      if (dense_attention)
        cpu::attn_dense_backward(a.dq, a.dk, a.dv, a.dq_pre, att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D,
                                 &counters);
      else
        attn_local_backward(a.dq, a.dk, a.dv, a.dq_pre, att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D,
                            &counters);
    } else {
      attn_local_backward(a.dq, a.dk, a.dv, a.dq_pre, att, lse, q, k, v, clamped.data(), B, H, Hkv, T, D,
                          &counters);
    }
    attention_seconds += now_seconds() - t_attn;
    rope_backward(a.dq, rope_cos_.data, rope_sin_.data, B * H, T, D);
    rope_backward(a.dk, rope_cos_.data, rope_sin_.data, B * Hkv, T, D);
    if (m.qk_norm) {
      rmsnorm_backward(a.dq_pre, g.q_norm + size_t(l) * D, a.dq, a.q_pre + l * NHD, p.q_norm + size_t(l) * D,
                       a.rstd_q + size_t(l) * N * H, N * H, D);
      rmsnorm_backward(a.dk_pre, g.k_norm + size_t(l) * D, a.dk, a.k_pre + l * NKD, p.k_norm + size_t(l) * D,
                       a.rstd_k + size_t(l) * N * Hkv, N * Hkv, D);
    } else {
      std::memcpy(a.dq_pre, a.dq, NHD * sizeof(real));
      std::memcpy(a.dk_pre, a.dk, NKD * sizeof(real));
    }
    qkv_split_backward(a.qkv, a.dq_pre, a.dk_pre, a.dv, B, T, H, Hkv, D);
    matmul_backward(a.dln, g.wqkv + size_t(l) * QKV * C, a.qkv, a.ln1 + l * NC, p.wqkv + size_t(l) * QKV * C, N, C,
                    QKV);
    rmsnorm_backward(a.dtmp, g.ln1 + size_t(l) * C, a.dln, x, p.ln1 + size_t(l) * C, a.rstd1 + size_t(l) * N, N, C);
    for (size_t i = 0; i < NC; i++) a.dres[i] += a.dtmp[i];
    if (after_layer_backward) after_layer_backward(l);
  }
  embedding_backward(g.embed, a.dres, tokens, N, C);
  if (after_layer_backward) after_layer_backward(-1);
}

template class Model<float>;
template class Model<double>;

}  // namespace aah
