#pragma once
#include "bench/measure.h"

namespace aah {
// `aah bench decode`: a bench-c-sized model at context 4096, the paper's final Full-adaptive window mix against
// full windows: KV-cache bytes, decode tokens/s near the end of the context, prefill tokens/s. Prefill and decode
// of both window sets run interleaved, round after round (measure.h); ratios are taken per round.
int bench_decode(const BenchOptions& o);
}  // namespace aah
