// The small model the controller-state and index targets (and their seeds) use.
#pragma once
#include "model/config.h"

namespace aah::fuzz {

inline Config small_config() {
  Config c;
  ModelConfig& m = c.model;
  m.hidden_size = 16, m.intermediate_size = 32, m.num_hidden_layers = 2, m.num_attention_heads = 4;
  m.num_key_value_heads = 2, m.head_dim = 4, m.vocab_size = 64;
  c.train.context = 32;
  c.aah.regime = "full_adaptive";
  return c;
}

}  // namespace aah::fuzz
