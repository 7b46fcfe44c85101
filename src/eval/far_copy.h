// Long range on real text (issue 40): does a regime make far copies harder? Within each evaluated window, a
// position i (predicting y_i = x_{i+1}) is a COPY at distance d when the n-gram ending at it, x_{i-n+1..i}, occurred
// before, its most recent earlier occurrence (no closer one) ends at j = i - d, and that occurrence's continuation
// is the target: x_{j+1} = y_i. A copy at distance d is what a head needs a window > d to read. Beside each distance
// bucket's copies: a CONTROL of tokens with no earlier occurrence in the window (y_i not among x_0..x_i), matched to
// the bucket's copies in frequency: per frequency class f (floor(log2(count)) of the token's count over the evaluated
// windows) the control's mean loss, weighted by the bucket's copies in f (classes without a novel token are left out
// of both). A regime whose windows cut what far copies need shows a copy loss that rises against full's by more
// than its control's; the report pairs both against full by seed.
//
// n (the n-gram length) is a parameter; aah eval uses kFarCopyNgram. Buckets are the retrieval ones, by candidate
// window: [0, W1), [W1, W2), ..., [W(K-1), inf).
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace aah {

constexpr int kFarCopyNgram = 3;  // [implemented choice] long enough that a repeat is rarely chance on BPE text

// The copies of one window of T positions: (position i, distance d) in increasing i. inputs (T) and targets (T).
struct FarCopy {
  int pos, distance;
};
std::vector<FarCopy> far_copies(const int32_t* inputs, const int32_t* targets, int T, int n);
// The positions whose target does not occur among the inputs up to and including it, in increasing order.
std::vector<int> novel_positions(const int32_t* inputs, const int32_t* targets, int T);

class FarCopyProbe {
 public:
  // windows: the candidate windows (bucket edges); token_count: per token id, its count over the evaluated tokens
  // (the frequency classes).
  FarCopyProbe(const std::vector<int>& windows, std::vector<int64_t> token_count, int n = kFarCopyNgram);
  // One evaluated window: inputs, targets (T) and the model's per-position losses (T).
  void add(const int32_t* inputs, const int32_t* targets, const float* losses, int T);
  // {"ngram", "novel": n, "buckets": [{"lo", "hi" (null: open), "n" (copies), "loss" (their mean), "matched" (copies
  //  in classes with a control), "control_loss" (frequency-matched control mean)}, ...]}; null where n = 0.
  nlohmann::json json() const;

 private:
  int cls(int32_t token) const;
  std::vector<int> edges_;           // bucket lower edges: 0, W1, ..., W(K-1)
  std::vector<int64_t> count_;       // per token id
  int n_;
  // per bucket and frequency class: copies and their loss sum; per class: novel tokens and their loss sum
  std::vector<std::vector<int64_t>> copy_n_;
  std::vector<std::vector<double>> copy_loss_;
  std::vector<int64_t> novel_n_;
  std::vector<double> novel_loss_;
};

}  // namespace aah
