#include "eval/eval.h"

#include <cmath>

#include "core/check.h"
#include "core/sys.h"

namespace aah {

EvalResult eval_loss(Model<float>& model, const std::vector<int32_t>& tokens, int context, int max_windows,
                     int batch_size, const std::function<void(int batch, int rows, bool before)>& around_batch,
                     int part, int parts) {
  const int64_t available = tokens.size() > 0 ? (int64_t(tokens.size()) - 1) / context : 0;
  const int windows = int(std::min<int64_t>(available, max_windows));
  if (windows <= 0)
    fail("[eval] validation data has ", tokens.size(), " tokens: need at least context+1 = ", context + 1);
  EvalResult r;
  const double t0 = now_seconds();
  std::vector<int32_t> inp(size_t(batch_size) * context), tgt(size_t(batch_size) * context);
  double sum = 0;
  int done = 0;
  r.position_loss_sum.assign(size_t(context), 0.0);
  for (int w0 = 0; w0 < windows; w0 += batch_size) {
    if ((w0 / batch_size) % parts != part) continue;
    const int B = std::min(batch_size, windows - w0);
    done += B;
    for (int b = 0; b < B; b++) {
      const int32_t* src = tokens.data() + int64_t(w0 + b) * context;
      std::copy(src, src + context, inp.begin() + int64_t(b) * context);
      std::copy(src + 1, src + context + 1, tgt.begin() + int64_t(b) * context);
    }
    if (around_batch) around_batch(w0 / batch_size, B, true);
    sum += model.forward(inp.data(), tgt.data(), B, context) * B * context;
    const float* losses = model.losses();  // (B, T)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < context; t++) r.position_loss_sum[size_t(t)] += losses[int64_t(b) * context + t];
    if (around_batch) around_batch(w0 / batch_size, B, false);
  }
  r.windows = done;
  r.tokens = int64_t(done) * context;
  r.loss_sum = sum;
  r.loss = r.tokens > 0 ? sum / double(r.tokens) : 0.0;
  r.ppl = std::exp(r.loss);
  r.seconds = now_seconds() - t0;
  r.tokens_per_s = r.tokens / std::max(1e-9, r.seconds);
  return r;
}

}  // namespace aah
