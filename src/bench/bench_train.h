#pragma once
#include <string>
#include "model/config.h"

namespace aah {
// The reference model of the benchmarks, bench-c: 4 layers, hidden 256, 8 heads x 32 (no GQA), SwiGLU 704,
// vocab 8192.
ModelConfig bench_c_model();
// `aah bench train`: times the training step of the reference config bench-c (4 layers, hidden 256, 8 heads x 32,
// SwiGLU 704, vocab 8192, batch 4, context 1024) with full windows and, when `regime` is not "full", side by side
// with that AAH regime (controller time amortised over its control interval), plus an sgemm in the same process.
// context: sequence length T (default 1024); the batch is 4096 / T sequences, so tokens per step stay 4096.
int bench_train(bool json, int steps, const std::string& regime, int context = 1024);
// GFLOP/s of a row-major sgemm (M, N, K) measured now, in this process (median of a few runs).
double bench_sgemm_gflops(int M = 1024, int N = 1024, int K = 1024);
}  // namespace aah
