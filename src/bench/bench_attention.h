#pragma once
#include <string>
#include <vector>

#include "bench/measure.h"

namespace aah {
// `aah bench attention [--json]`: times the tiled windowed attention (cpu::attn_local_*) and the dense-masked
// path (cpu::attn_dense_*), forward and backward, for B = 1, H = 8, D in {32, 64, 128}, T in {1024, 4096} and the
// window sets "full" (all T), "T/8" and "adaptive" ([T/8 x4, T/4 x2, T/2, T]), interleaved with an sgemm, per
// (T, D) one measure_interleaved (measure.h). Prints an aligned table, or one JSON object per row with --json.
// contexts / head_dims empty: the defaults (T = 1024, 4096, 16384; D = 32, 64, 128; T > 4096 with D = 64 only
// unless head_dims is given); dense = false skips the dense path; windows: more window sets, "W=N" with every
// head at N, for each N <= T (tiled path only). precisions: "fp32" always (the reference of every ratio); "bf16"
// adds the tiled path through the backend local-bf16 (its attention_forward / attention_backward) for every window
// set and oneDNN's bf16 product as its reference rate, in the same rounds, each bf16 row with its speedup over the
// fp32 row (fp32 time / bf16 time, per round); refused on a CPU without bf16 instructions (backend_for). The dense
// path stays fp32. Returns 0.
int bench_attention(const BenchOptions& o, const std::vector<int>& contexts = {},
                    const std::vector<int>& head_dims = {}, bool dense = true, const std::vector<int>& windows = {},
                    const std::vector<std::string>& precisions = {});
}  // namespace aah
