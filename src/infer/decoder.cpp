#include "infer/decoder.h"

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "kernels/backend.h"

namespace aah {

Decoder::Decoder(Model<float>& model, int max_positions) : model_(model), max_positions_(max_positions) {
  const ModelConfig& m = model.config();
  const size_t C = m.hidden_size, H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim,
               F = m.intermediate_size;
  const Memory& mem = model.backend->memory;  // every buffer below is in the model's memory
  cache_.init(mem, m.num_hidden_layers, H, Hkv, D, model.windows().data(), max_positions, model.backend->bf16);
  ArenaPlan<float> plan;
  for (auto [slot, n] : {std::pair{&a_.x, C}, {&a_.ln1, C}, {&a_.rstd1, 1}, {&a_.qkv, (H + 2 * Hkv) * D},
                         {&a_.q_pre, H * D}, {&a_.k_pre, Hkv * D}, {&a_.rstd_q, H}, {&a_.rstd_k, Hkv},
                         {&a_.q, H * D}, {&a_.k, Hkv * D}, {&a_.v, Hkv * D}, {&a_.att, H * D},
                         {&a_.merged, H * D}, {&a_.xa, C}, {&a_.ln2, C}, {&a_.rstd2, 1}, {&a_.h, 2 * F},
                         {&a_.act, F}, {&lnf_, C}, {&rstdf_, 1}, {&cos_, D / 2}, {&sin_, D / 2}})
    plan.add(slot, n);
  buf_ = DeviceBuffer<float>(mem, plan.total());
  plan.place(buf_.data);
  a_.x_out = a_.x;  // x is not read after xa = x + o_proj(...), so the layer's output may overwrite it
  logits_ = DeviceBuffer<float>(mem, m.vocab_size);
  if (!mem.host) logits_host_.resize(m.vocab_size);
  scores_ = DeviceBuffer<float>(mem, H * max_positions);  // one row per head (heads run in parallel)
  order_.resize(H);
  if (model.backend->bf16) w16_.round(model.params(), m);
}

size_t Decoder::matrix_bytes() const {
  return Weights16::elements(model_.config()) * (w16_.empty() ? sizeof(float) : sizeof(uint16_t));
}

// logits_ = x lm_head^T for one row x (the bf16 copy where the decoder keeps one); returns them on the host.
const float* Decoder::logits_of(const float* x) {
  const ModelConfig& m = model_.config();
  weight_product(*model_.backend, logits_.data, x, model_.params().lm_head,
                 w16_.empty() ? nullptr : w16_.lm_head.data(), 1, m.hidden_size, m.vocab_size);
  const Memory& mem = model_.backend->memory;
  if (mem.host) return logits_.data;
  mem.download(logits_host_.data(), logits_.data, logits_host_.size() * sizeof(float));
  return logits_host_.data();
}

const float* Decoder::prefill(const int32_t* tokens, int n) {
  AAH_CHECK(n > 0);
  if (cache_.length + n > max_positions_)
    fail("[generate] ", cache_.length + n, " positions exceed the session's ", max_positions_);
  const ModelConfig& m = model_.config();
  const int C = m.hidden_size, L = m.num_hidden_layers, Hkv = m.num_key_value_heads, D = m.head_dim;
  // The batched forward handles a fresh session's first chunk; everything else goes token by token.
  const int chunk = cache_.length == 0 ? std::min(n, model_.max_context()) : 0;
  const float* out = nullptr;
  if (chunk > 0) {
    // Capture every layer's rotated keys and values as the forward computes them.
    auto saved = model_.before_attention;
    model_.before_attention = [&](int l, const float* q, const float* k, const float* v, int B, int T, int* win) {
      if (saved) saved(l, q, k, v, B, T, win);
      for (int hk = 0; hk < Hkv; hk++) {
        const int cap = cache_.capacity[l * Hkv + hk];
        for (int t = std::max(0, T - cap); t < T; t++)
          cache_.store(l, hk, t, k + (size_t(hk) * T + t) * D, v + (size_t(hk) * T + t) * D, /*from_host=*/true);
      }
    };
    const float* hidden = model_.forward_hidden(tokens, 1, chunk);
    model_.before_attention = saved;
    (void)L;
    out = logits_of(hidden + size_t(chunk - 1) * C);
    cache_.length = chunk;
  }
  for (int i = chunk; i < n; i++) out = step(tokens[i]);
  return out;
}

const float* Decoder::step(int32_t token) {
  const ModelConfig& m = model_.config();
  const int C = m.hidden_size, L = m.num_hidden_layers, H = m.num_attention_heads, Hkv = m.num_key_value_heads,
            D = m.head_dim, V = m.vocab_size;
  const int pos = cache_.length;
  if (pos >= max_positions_) fail("[generate] the session is full (", max_positions_, " positions)");
  if (token < 0 || token >= V) fail("[generate] token id ", token, " outside the vocabulary (", V, ")");
  const Params<float>& p = model_.params();
  const Backend<float>& be = *model_.backend;
  const Memory& mem = be.memory;
  HostStage<float> cos(mem, cos_, D / 2), sin(mem, sin_, D / 2);
  rope_angles(cos.data(), sin.data(), pos, 1, D, m.rope_theta);
  cos.commit(), sin.commit();
  const int group = H / Hkv;
  mem.copy(a_.x, p.embed + size_t(token) * C, C * sizeof(float));
  for (int l = 0; l < L; l++) {
    const LayerWeights<float> w = p.layer(l);
    const LayerWeights16* w16 = w16_.empty() ? nullptr : &w16_.layers[l];
    layer_forward_pre_attention(be, a_, w, m, 1, 1, cos_, sin_, w16);
    for (int hk = 0; hk < Hkv; hk++)
      cache_.store(l, hk, pos, a_.k + size_t(hk) * D, a_.v + size_t(hk) * D, /*from_host=*/false);
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
      float *out = a_.att + size_t(h) * D, *scores = scores_.data + size_t(h) * max_positions_;
      const size_t at = cache_.offset[ring];
      if (cache_.bf16)
        be.attention_decode_bf16(out, a_.q + size_t(h) * D, cache_.k16.data + at, cache_.v16.data + at, cap, lo % cap,
                                 n, D, scores);
      else
        be.attention_decode(out, a_.q + size_t(h) * D, cache_.k.data + at, cache_.v.data + at, cap, lo % cap, n, D,
                            scores);
      pairs += n;
    }
    pairs_ += pairs;
    layer_forward_post_attention(be, a_, w, m, 1, 1, w16);
  }
  be.rmsnorm_forward(lnf_, rstdf_, a_.x, p.norm_f, 1, C, float(m.rms_norm_eps));
  const float* logits = logits_of(lnf_);
  cache_.length = pos + 1;
  return logits;
}

}  // namespace aah
