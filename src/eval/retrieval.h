// Retrieval accuracy on the synth corpus (data/synth.h): a question is ASK k v, and its value v can only be predicted
// by remembering the earlier DEF k v. Within one evaluated window of T input positions, a question counts when its
// ASK, its k (the query whose next token is v) and the nearest earlier DEF k v of the same document all lie in the
// window; a question whose DEF lies before the window is not counted. The distance is ASK's position minus DEF's.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace aah {

// Retrieval is kept, all or nothing per run, when the accuracy in the farthest distance bucket is at least this (the
// report's counts; the retrieval preset's bases train on until theirs reaches it).
constexpr double kRetrievalKept = 0.95;
// The accuracy in the farthest bucket of a retrieval_json, NaN without questions there.
double retrieval_far_accuracy(const nlohmann::json& retrieval);

struct RetrievalQuestion {
  int def;        // position of DEF in the window
  int ask;        // position of ASK
  int query;      // position of k in `ASK k` (ask + 1): its output predicts the value
  int32_t value;  // v, the target at `query`
};

// The countable questions of one window: inputs (T) and their next-token targets (T).
std::vector<RetrievalQuestion> retrieval_questions(const int32_t* inputs, const int32_t* targets, int T);

struct RetrievalBucket {
  int lo = 0, hi = -1;  // distance range [lo, hi); hi = -1: no upper bound
  int64_t n = 0, correct = 0;
  double loss_sum = 0;  // nats, summed over the bucket's questions
};

// Buckets by DEF-ASK distance, one per candidate window (ascending; the last is the context): [0, W1), [W1, W2), ...,
// [W(K-1), inf). A head of window W sees a question's DEF about when its distance is below W, so each bucket is what
// the next window up adds. Windows 256/512/1024/2048: [0, 256), [256, 512), [512, 1024), [1024, inf).
std::vector<RetrievalBucket> retrieval_buckets(const std::vector<int>& windows);
void retrieval_add(std::vector<RetrievalBucket>& buckets, int distance, bool correct, double loss);
// Scores one window: predict(query) is the model's argmax token at position `query`, losses (T) the per-position
// next-token losses. Adds every countable question to its bucket.
void retrieval_score(std::vector<RetrievalBucket>& buckets, const int32_t* inputs, const int32_t* targets, int T,
                     const std::function<int32_t(int query)>& predict, const float* losses);
// The same after model.forward(inputs, targets, B, T) of B windows (inputs and targets (B, T), row-major): the
// prediction is the argmax of the LM head on the final norm's output that the forward left, the loss its loss.
void retrieval_score_forward(std::vector<RetrievalBucket>& buckets, Model<float>& model, const int32_t* inputs,
                             const int32_t* targets, int B, int T);
// {"accuracy", "loss", "n", "buckets": [{"lo", "hi" (null: open), "n", "accuracy", "loss"}, ...]}; accuracy and
// loss are null where n = 0.
nlohmann::json retrieval_json(const std::vector<RetrievalBucket>& buckets);

}  // namespace aah
