#pragma once
#include "bench/measure.h"

namespace aah {
// `aah bench attention [--json]`: times the tiled windowed attention (cpu::attn_local_*) and the dense-masked
// path (cpu::attn_dense_*), forward and backward, for B = 1, H = 8, D in {32, 64, 128}, T in {1024, 4096} and the
// window sets "full" (all T), "T/8" and "adaptive" ([T/8 x4, T/4 x2, T/2, T]), interleaved with an sgemm, per
// (T, D) one measure_interleaved (measure.h). Prints an aligned table, or one JSON object per row with --json.
// Returns 0.
int bench_attention(const BenchOptions& o);
}  // namespace aah
