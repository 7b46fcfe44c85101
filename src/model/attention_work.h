// The attention work of full windows: the denominator of every measured attention work ratio (train, eval).
#pragma once
#include <cstdint>

#include "kernels/backend.h"
#include "model/config.h"

namespace aah {

// Multiply-adds the attention kernels execute for one layer and ONE sequence of T tokens with every window full
// (forward, plus backward when asked): the denominator of the measured attention work ratio. The count depends
// only on shapes and windows (and is linear in the batch), so one run on zeros is enough; cached per shape.
uint64_t full_window_attention_macs(const ModelConfig& m, int T, const Backend<float>& backend, bool backward);

}  // namespace aah
