#pragma once
#include <vector>

#include "bench/measure.h"

namespace aah {
// `aah bench attention [--json]`: times the tiled windowed attention (cpu::attn_local_*) and the dense-masked
// path (cpu::attn_dense_*), forward and backward, for B = 1, H = 8, D in {32, 64, 128}, T in {1024, 4096} and the
// window sets "full" (all T), "T/8" and "adaptive" ([T/8 x4, T/4 x2, T/2, T]), interleaved with an sgemm, per
// (T, D) one measure_interleaved (measure.h). Prints an aligned table, or one JSON object per row with --json.
// contexts / head_dims empty: the defaults (T = 1024, 4096, 16384; D = 32, 64, 128; T > 4096 with D = 64 only
// unless head_dims is given); dense = false skips the dense path; windows: more window sets, "W=N" with every
// head at N, for each N <= T (tiled path only). Returns 0.
int bench_attention(const BenchOptions& o, const std::vector<int>& contexts = {},
                    const std::vector<int>& head_dims = {}, bool dense = true, const std::vector<int>& windows = {});
}  // namespace aah
