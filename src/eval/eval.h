// Validation loss: mean next-token loss over consecutive, non-overlapping windows of context+1 tokens from the
// start of the token stream (stride = context), as many as `max_windows` (fewer if the stream is shorter).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace aah {

struct EvalResult {
  double loss = 0;
  double loss_sum = 0;  // sum of the token losses (loss = loss_sum / tokens)
  double ppl = 0;
  int windows = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  std::vector<double> position_loss_sum;  // (T) loss at position t (predicting token t+1), summed over the windows
};

// Runs in micro-batches of up to model's max batch; context T must not exceed the model's max T.
// `around_batch(i, rows, before)` is called before and after micro-batch i (a window policy deciding windows at
// evaluation time hooks in here). With parts > 1 only micro-batches i with i % parts == part run (data-parallel
// training splits evaluation over its ranks) and the result is over those.
EvalResult eval_loss(Model<float>& model, const std::vector<int32_t>& tokens, int context, int max_windows,
                     int batch_size, const std::function<void(int batch, int rows, bool before)>& around_batch = {},
                     int part = 0, int parts = 1);

}  // namespace aah
