// AdamW with decoupled weight decay on matrices only, the learning-rate schedule (linear warmup, cosine decay to
// min_lr) and the global gradient norm. Deterministic: fixed chunking, whatever the thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace aah {

// Learning rate for optimizer step `step` (0-based).
double lr_at(const TrainConfig& t, int step);

// sqrt(sum of squares) of n values in the backend's memory, accumulated in double over fixed chunks.
double global_norm(const Backend<float>& be, const float* g, size_t n);

// The moments live in the model's memory (kernels/backend.h: Memory) and the update runs on its backend.
struct AdamW {
  DeviceBuffer<float> m, v;     // moments, one per parameter
  DeviceBuffer<uint8_t> decay;  // 1 where weight decay applies
  int64_t t = 0;                // updates applied so far
  const Backend<float>* backend = nullptr;

  void init(const Model<float>& model);
  // params -= lr * (mhat / (sqrt(vhat) + eps) + wd * params), with gradient g scaled by grad_scale first.
  void update(float* params, const float* grads, size_t n, double lr, const TrainConfig& cfg, float grad_scale);
};

}  // namespace aah
