// Incremental decoding with a per-head KV cache: prefill the prompt through the model's forward (the windowed
// attention kernel), then one token at a time, attending each head only to its last W_h positions in the cache.
// A step runs each layer through the model's own layer code (model/layer.h) with B = T = 1, its attention over
// the cache in the middle. The logits equal a full forward over the same tokens (tests check 1e-5).
//
// C hidden, L layers, H heads, Hkv KV heads, D head dim, F intermediate, V vocabulary.
#pragma once
#include <cstdint>
#include <vector>

#include "infer/kv_cache.h"
#include "model/model.h"

namespace aah {

class Decoder {
 public:
  // Uses the windows in force in `model` (model.windows(), (L, H)); holds at most max_positions positions.
  Decoder(Model<float>& model, int max_positions);
  // Appends tokens to the session (prompt chunks up to the model's context go through the batched forward);
  // returns the logits of the last one (V floats, valid until the next call).
  const float* prefill(const int32_t* tokens, int n);
  // Appends one token; returns the logits of the next position.
  const float* step(int32_t token);
  const KVCache& cache() const { return cache_; }
  int position() const { return cache_.length; }
  int max_positions() const { return max_positions_; }
  double attention_pairs() const { return pairs_; }  // (query, key) pairs attended in step()
  // Bytes of weight matrices a step reads: 2 per value on a bf16 backend (copies rounded at construction), else 4.
  size_t matrix_bytes() const;

 private:
  Model<float>& model_;
  int max_positions_;
  KVCache cache_;
  LayerActs<float> a_{};        // one layer's activations for one token (x_out = x: the residual in place)
  float* lnf_ = nullptr;        // (C) final norm output
  float* rstdf_ = nullptr;      // (1)
  float* cos_ = nullptr;        // (D/2) RoPE angles of the position being decoded
  float* sin_ = nullptr;        // (D/2)
  DeviceBuffer<float> buf_;     // everything above, one allocation (it and the two below: the model's memory)
  DeviceBuffer<float> logits_;  // (V)
  DeviceBuffer<float> scores_;  // (H, max_positions) one row per head
  std::vector<float> logits_host_;  // (V) the logits downloaded, where the model's memory is not the host's
  std::vector<int> order_;  // (H) heads in order of decreasing window
  // On a bf16 backend: every weight matrix rounded to bf16 once, at construction (the model's weights then), which
  // the products read instead of the fp32 ones; empty otherwise.
  Weights16 w16_;
  const float* logits_of(const float* x);
  double pairs_ = 0;
};

}  // namespace aah
