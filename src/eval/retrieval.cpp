#include "eval/retrieval.h"

#include <algorithm>

#include "core/check.h"
#include "data/synth.h"
#include "kernels/backend.h"

namespace aah {

std::vector<RetrievalQuestion> retrieval_questions(const int32_t* inputs, const int32_t* targets, int T) {
  std::vector<RetrievalQuestion> qs;
  for (int query = 1; query < T; query++) {
    const int ask = query - 1;
    if (inputs[ask] != kSynthAsk) continue;
    const int32_t key = inputs[query], value = targets[query];
    // The nearest earlier DEF key value, not crossing a document start.
    for (int d = ask - 3; d >= 0; d--) {
      if (inputs[d] == kSynthDoc) break;
      if (inputs[d] == kSynthDef && inputs[d + 1] == key && inputs[d + 2] == value) {
        qs.push_back({d, ask, query, value});
        break;
      }
    }
  }
  return qs;
}

std::vector<RetrievalBucket> retrieval_buckets(const std::vector<int>& windows) {
  std::vector<RetrievalBucket> b;
  int lo = 0;
  for (size_t i = 0; i + 1 < windows.size(); i++)
    if (windows[i] > lo) b.push_back({.lo = lo, .hi = windows[i]}), lo = windows[i];
  b.push_back({.lo = lo, .hi = -1});
  return b;
}

void retrieval_add(std::vector<RetrievalBucket>& buckets, int distance, bool correct, double loss) {
  for (RetrievalBucket& b : buckets)
    if (distance >= b.lo && (b.hi < 0 || distance < b.hi)) {
      b.n++;
      b.correct += correct;
      b.loss_sum += loss;
      return;
    }
}

void retrieval_score(std::vector<RetrievalBucket>& buckets, const int32_t* inputs, const int32_t* targets, int T,
                     const std::function<int32_t(int query)>& predict, const float* losses) {
  for (const RetrievalQuestion& q : retrieval_questions(inputs, targets, T))
    retrieval_add(buckets, q.ask - q.def, predict(q.query) == q.value, losses[q.query]);
}

void retrieval_score_forward(std::vector<RetrievalBucket>& buckets, Model<float>& model, const int32_t* inputs,
                             const int32_t* targets, int B, int T) {
  const int C = model.config().hidden_size, V = model.config().vocab_size;
  AAH_CHECK(model.backend->memory.host, "[retrieval] backend ", model.backend->name,
            ": the answers are scored from the final norm's output on the host");
  const float* lnf = model.acts().lnf;  // (B T, C)
  std::vector<float> logits(static_cast<size_t>(V));  // (V)
  for (int b = 0; b < B; b++) {
    auto predict = [&](int query) {
      model.backend->matmul_forward(logits.data(), lnf + (int64_t(b) * T + query) * C, model.params().lm_head, 1, C, V);
      return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
    retrieval_score(buckets, inputs + int64_t(b) * T, targets + int64_t(b) * T, T, predict,
                    model.losses() + int64_t(b) * T);
  }
}

nlohmann::json retrieval_json(const std::vector<RetrievalBucket>& buckets) {
  using json = nlohmann::json;
  auto mean = [](double sum, int64_t n) { return n > 0 ? json(sum / double(n)) : json(nullptr); };
  int64_t n = 0, correct = 0;
  double loss_sum = 0;
  json rows = json::array();
  for (const RetrievalBucket& b : buckets) {
    rows.push_back({{"lo", b.lo},
                    {"hi", b.hi < 0 ? json(nullptr) : json(b.hi)},
                    {"n", b.n},
                    {"accuracy", mean(double(b.correct), b.n)},
                    {"loss", mean(b.loss_sum, b.n)}});
    n += b.n;
    correct += b.correct;
    loss_sum += b.loss_sum;
  }
  return {{"accuracy", mean(double(correct), n)}, {"loss", mean(loss_sum, n)}, {"n", n}, {"buckets", rows}};
}

double retrieval_far_accuracy(const nlohmann::json& retrieval) {
  if (!retrieval.is_object() || !retrieval.contains("buckets") || !retrieval["buckets"].is_array()) return NAN;
  const nlohmann::json* far = nullptr;
  for (const auto& b : retrieval["buckets"])
    if (b.is_object() && b.contains("lo") && b["lo"].is_number() && (!far || b["lo"] > (*far)["lo"])) far = &b;
  return far && far->contains("accuracy") && (*far)["accuracy"].is_number() ? (*far)["accuracy"].get<double>() : NAN;
}

}  // namespace aah
