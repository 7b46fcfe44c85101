#include "infer/sampler.h"

#include <algorithm>
#include <cmath>

namespace aah {

int32_t Sampler::sample(const float* logits, int V) {
  if (o_.temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);  // ties: first
  cand_.resize(V);
  const float mx = *std::max_element(logits, logits + V);
  for (int i = 0; i < V; i++) cand_[i] = {float(std::exp((logits[i] - mx) / o_.temperature)), int32_t(i)};
  // Most probable first; ties by id so the order never depends on the sort's stability.
  auto by_prob = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (o_.top_k > 0 && size_t(o_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + o_.top_k, cand_.end(), by_prob);
    n = size_t(o_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_prob);
  }
  double total = 0;
  for (size_t i = 0; i < n; i++) total += cand_[i].first;
  if (o_.top_p < 1) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
      acc += cand_[i].first / total;
      if (acc >= o_.top_p) {
        n = i + 1;
        break;
      }
    }
    total = 0;
    for (size_t i = 0; i < n; i++) total += cand_[i].first;
  }
  double u = rng_.uniform() * total;
  for (size_t i = 0; i < n; i++) {
    u -= cand_[i].first;
    if (u <= 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace aah
