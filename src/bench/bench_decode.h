#pragma once
#include <string>
#include <vector>

#include "bench/measure.h"

namespace aah {
// `aah bench decode`: a bench-c-sized model at context T (default 4096), the paper's final Full-adaptive window mix
// against full windows: KV-cache bytes, decode tokens/s of the last 128 tokens of the context, prefill tokens/s of
// the T - 128 before them, and the memory-bound prediction of the decode time ratio (bytes read per token). Each
// round prefills both window sets, then decodes in 8 blocks of 16 tokens that alternate between them, so that the
// two decodes meet the same machine (measure.h); ratios are taken per round.
// precisions: "bf16" also times both window sets with train.precision=bf16 (a bf16 KV cache), ratios vs fp32 full.
int bench_decode(const BenchOptions& o, int T = 4096, const std::vector<std::string>& precisions = {});
}  // namespace aah
