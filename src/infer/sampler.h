// Next-token sampling: temperature (0 = greedy argmax), then top-k, then top-p (nucleus), seeded.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace aah {

struct SamplerOptions {
  double temperature = 0.8;
  int top_k = 50;      // 0: off
  double top_p = 0.95;  // 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}
  int32_t sample(const float* logits, int V);

 private:
  SamplerOptions o_;
  Rng rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // (probability, id), reused
};

}  // namespace aah
