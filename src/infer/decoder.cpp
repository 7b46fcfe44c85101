#include "infer/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/decode.h"

namespace aah {

Decoder::Decoder(Model<float>& model, int max_positions) : model_(model), max_positions_(max_positions) {
  const ModelConfig& m = model.config();
  const int C = m.hidden_size, H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim,
            F = m.intermediate_size;
  cache_.init(m.num_hidden_layers, H, Hkv, D, model.windows().data(), max_positions);
  x_.resize(C);
  ln_.resize(C);
  tmp_.resize(C);
  qkv_.resize(size_t(H + 2 * Hkv) * D);
  att_.resize(size_t(H) * D);
  h_.resize(size_t(2) * F);
  act_.resize(F);
  logits_.resize(m.vocab_size);
  scores_.resize(size_t(H) * max_positions);  // one row per head (heads run in parallel)
  cos_.resize(D / 2);
  sin_.resize(D / 2);
  rstd_.resize(H + Hkv);
  order_.resize(H);
}

const float* Decoder::prefill(const int32_t* tokens, int n) {
  AAH_CHECK(n > 0);
  if (cache_.length + n > max_positions_)
    fail("[generate] ", cache_.length + n, " positions exceed the session's ", max_positions_);
  const ModelConfig& m = model_.config();
  const int C = m.hidden_size, L = m.num_hidden_layers, Hkv = m.num_key_value_heads, D = m.head_dim;
  // The batched forward handles a fresh session's first chunk; everything else goes token by token.
  const int chunk = cache_.length == 0 ? std::min(n, model_.max_context()) : 0;
  if (chunk > 0) {
    // Capture every layer's rotated keys and values as the forward computes them.
    auto saved = model_.before_attention;
    model_.before_attention = [&](int l, const float* q, const float* k, const float* v, int B, int T, int* win) {
      if (saved) saved(l, q, k, v, B, T, win);
      for (int hk = 0; hk < Hkv; hk++) {
        const int cap = cache_.capacity[l * Hkv + hk];
        for (int t = std::max(0, T - cap); t < T; t++) {
          std::memcpy(cache_.key(l, hk, t), k + (size_t(hk) * T + t) * D, D * sizeof(float));
          std::memcpy(cache_.value(l, hk, t), v + (size_t(hk) * T + t) * D, D * sizeof(float));
        }
      }
    };
    const float* hidden = model_.forward_hidden(tokens, 1, chunk);
    model_.before_attention = saved;
    (void)L;
    cpu::matmul_forward(logits_.data(), hidden + size_t(chunk - 1) * C, model_.params().lm_head, 1, C, m.vocab_size);
    cache_.length = chunk;
  }
  const float* out = logits_.data();
  for (int i = chunk; i < n; i++) out = step(tokens[i]);
  return out;
}

const float* Decoder::step(int32_t token) {
  const ModelConfig& m = model_.config();
  const int C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads, Hkv = m.num_key_value_heads,
            D = m.head_dim, F = m.intermediate_size, V = m.vocab_size, QKV = (H + 2 * Hkv) * D;
  const int pos = cache_.length;
  if (pos >= max_positions_) fail("[generate] the session is full (", max_positions_, " positions)");
  if (token < 0 || token >= V) fail("[generate] token id ", token, " outside the vocabulary (", V, ")");
  const float eps = float(m.rms_norm_eps);
  Params<float>& p = model_.params();
  // RoPE angles of this position, computed exactly as the model's table.
  for (int i = 0; i < D / 2; i++) {
    const double inv_freq = std::pow(m.rope_theta, -2.0 * i / D);
    cos_[i] = float(std::cos(pos * inv_freq));
    sin_[i] = float(std::sin(pos * inv_freq));
  }
  const int group = H / Hkv;
  std::memcpy(x_.data(), p.embed + size_t(token) * C, C * sizeof(float));
  for (int l = 0; l < L; l++) {
    cpu::rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), p.ln1 + size_t(l) * C, 1, C, eps);
    cpu::matmul_forward(qkv_.data(), ln_.data(), p.wqkv + size_t(l) * QKV * C, 1, C, QKV);
    float* q = qkv_.data();
    float* k = q + H * D;
    float* v = k + Hkv * D;
    if (m.qk_norm) {
      cpu::rmsnorm_forward(q, rstd_.data(), q, p.q_norm + size_t(l) * D, H, D, eps);
      cpu::rmsnorm_forward(k, rstd_.data(), k, p.k_norm + size_t(l) * D, Hkv, D, eps);
    }
    cpu::rope_forward(q, cos_.data(), sin_.data(), H, 1, D);
    cpu::rope_forward(k, cos_.data(), sin_.data(), Hkv, 1, D);
    for (int hk = 0; hk < Hkv; hk++) {
      std::memcpy(cache_.key(l, hk, pos), k + size_t(hk) * D, D * sizeof(float));
      std::memcpy(cache_.value(l, hk, pos), v + size_t(hk) * D, D * sizeof(float));
    }
    // Each head attends to its last W_h positions (attn_visible), all still in its KV head's ring. Heads run in
    // parallel, longest first, so one long head does not end up last on a thread (windows differ up to 8x).
    const int* win = model_.windows().data() + size_t(l) * H;
    for (int h = 0; h < H; h++) order_[h] = h;
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) { return win[a] > win[b]; });
    double pairs = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : pairs)
    for (int i = 0; i < H; i++) {
      const int h = order_[i], hk = h / group, lo = std::max(0, pos - win[h] + 1), n = pos - lo + 1;
      const int ring = l * Hkv + hk, cap = cache_.capacity[ring];
      cpu::attn_decode_forward(att_.data() + size_t(h) * D, q + size_t(h) * D, cache_.k.data() + cache_.offset[ring],
                               cache_.v.data() + cache_.offset[ring], cap, lo % cap, n, D,
                               scores_.data() + size_t(h) * max_positions_);
      pairs += n;
    }
    pairs_ += pairs;
    cpu::matmul_forward(tmp_.data(), att_.data(), p.wo + size_t(l) * C * H * D, 1, H * D, C);
    for (int c = 0; c < C; c++) x_[c] += tmp_[c];
    cpu::rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), p.ln2 + size_t(l) * C, 1, C, eps);
    cpu::matmul_forward(h_.data(), ln_.data(), p.w_gate_up + size_t(l) * 2 * F * C, 1, C, 2 * F);
    cpu::swiglu_forward(act_.data(), h_.data(), 1, F);
    cpu::matmul_forward(tmp_.data(), act_.data(), p.w_down + size_t(l) * C * F, 1, F, C);
    for (int c = 0; c < C; c++) x_[c] += tmp_[c];
  }
  cpu::rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), p.norm_f, 1, C, eps);
  cpu::matmul_forward(logits_.data(), ln_.data(), p.lm_head, 1, C, V);
  cache_.length = pos + 1;
  return logits_.data();
}

}  // namespace aah
