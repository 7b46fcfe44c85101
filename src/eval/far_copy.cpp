#include "eval/far_copy.h"

#include <array>
#include <map>
#include <unordered_set>

#include "core/check.h"

namespace aah {

namespace {
constexpr int kMaxNgram = 8;
constexpr int kClasses = 64;  // floor(log2(count)) of an int64 count
}  // namespace

std::vector<FarCopy> far_copies(const int32_t* inputs, const int32_t* targets, int T, int n) {
  AAH_CHECK(n >= 1 && n <= kMaxNgram, "[far_copy] n-gram length ", n, " outside [1, ", kMaxNgram, "]");
  std::map<std::array<int32_t, kMaxNgram>, int> last_end;  // n-gram -> the end of its latest occurrence so far
  std::vector<FarCopy> out;
  for (int i = n - 1; i < T; i++) {
    std::array<int32_t, kMaxNgram> key{};
    for (int m = 0; m < n; m++) key[size_t(m)] = inputs[i - n + 1 + m];
    auto [it, fresh] = last_end.try_emplace(key, i);
    if (!fresh) {
      const int j = it->second;  // the most recent earlier occurrence
      if (targets[j] == targets[i]) out.push_back({i, i - j});
      it->second = i;
    }
  }
  return out;
}

std::vector<int> novel_positions(const int32_t* inputs, const int32_t* targets, int T) {
  std::unordered_set<int32_t> seen;
  std::vector<int> out;
  for (int i = 0; i < T; i++) {
    seen.insert(inputs[i]);
    if (!seen.count(targets[i])) out.push_back(i);
  }
  return out;
}

FarCopyProbe::FarCopyProbe(const std::vector<int>& windows, std::vector<int64_t> token_count, int n)
    : count_(std::move(token_count)), n_(n) {
  edges_.push_back(0);
  for (size_t k = 0; k + 1 < windows.size(); k++) edges_.push_back(windows[k]);
  copy_n_.assign(edges_.size(), std::vector<int64_t>(kClasses, 0));
  copy_loss_.assign(edges_.size(), std::vector<double>(kClasses, 0.0));
  novel_n_.assign(kClasses, 0);
  novel_loss_.assign(kClasses, 0.0);
}

int FarCopyProbe::cls(int32_t token) const {
  const int64_t c = token >= 0 && size_t(token) < count_.size() ? count_[size_t(token)] : 0;
  int f = 0;
  while (f + 1 < kClasses && (int64_t(1) << (f + 1)) <= c) f++;
  return f;  // floor(log2(c)), 0 for c <= 1
}

void FarCopyProbe::add(const int32_t* inputs, const int32_t* targets, const float* losses, int T) {
  for (const FarCopy& c : far_copies(inputs, targets, T, n_)) {
    size_t b = 0;
    while (b + 1 < edges_.size() && c.distance >= edges_[b + 1]) b++;
    copy_n_[b][size_t(cls(targets[c.pos]))]++;
    copy_loss_[b][size_t(cls(targets[c.pos]))] += losses[c.pos];
  }
  for (const int i : novel_positions(inputs, targets, T)) {
    novel_n_[size_t(cls(targets[i]))]++;
    novel_loss_[size_t(cls(targets[i]))] += losses[i];
  }
}

nlohmann::json FarCopyProbe::json() const {
  nlohmann::json buckets = nlohmann::json::array();
  int64_t novel = 0;
  for (const int64_t x : novel_n_) novel += x;
  for (size_t b = 0; b < edges_.size(); b++) {
    int64_t n = 0, matched = 0;
    double loss = 0, control = 0;
    for (int f = 0; f < kClasses; f++) {
      n += copy_n_[b][size_t(f)];
      loss += copy_loss_[b][size_t(f)];
      if (novel_n_[size_t(f)] == 0) continue;
      matched += copy_n_[b][size_t(f)];
      control += double(copy_n_[b][size_t(f)]) * novel_loss_[size_t(f)] / double(novel_n_[size_t(f)]);
    }
    buckets.push_back({{"lo", edges_[b]},
                       {"hi", b + 1 < edges_.size() ? nlohmann::json(edges_[b + 1]) : nlohmann::json(nullptr)},
                       {"n", n},
                       {"loss", n > 0 ? nlohmann::json(loss / double(n)) : nlohmann::json(nullptr)},
                       {"matched", matched},
                       {"control_loss", matched > 0 ? nlohmann::json(control / double(matched)) : nlohmann::json(nullptr)}});
  }
  return {{"ngram", n_}, {"novel", novel}, {"buckets", buckets}};
}

}  // namespace aah
