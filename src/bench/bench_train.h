#pragma once
#include <string>

#include <cstdint>
#include <vector>

#include "bench/measure.h"
#include "model/config.h"
#include "model/engine.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace aah {
// The reference model of the benchmarks, bench-c: 4 layers, hidden 256, 8 heads x 32 (no GQA), SwiGLU 704,
// vocab 8192.
ModelConfig bench_c_model();
// `aah bench train`: times the training step of the reference config bench-c (4 layers, hidden 256, 8 heads x 32,
// SwiGLU 704, vocab 8192, batch 4, context 1024) with full windows and, when `regime` is not "full", interleaved
// with that AAH regime, plus an sgemm in the same process (measure.h: rounds, medians, spreads, per-round ratios).
// The regime's controller is warmed up once, before the timed rounds (forward passes on its update steps until
// its windows stop changing); its windows are then frozen for the timing, and its update cost, measured during
// the warm-up, is added amortised over its control interval.
// context: sequence length T (default 1024); the batch is 4096 / T sequences, so tokens per step stay 4096.
// preset: a suite preset's name: its model, context and batch instead of bench-c's (context is then ignored).
// window_sets: fixed window sets also timed against full windows, the same in every layer: "mix" (the paper's final
// Full-adaptive mix: on 8 heads 4 x T/8, 2 x T/4, T/2, T; see paper_adaptive_mix) and "T/8" (every head).
// precisions: "fp32" always (the reference of every ratio); "bf16" adds the full-window step at train.precision=bf16
// and oneDNN's in-process bf16 product, interleaved with the rest (refused on a CPU without bf16 instructions).
int bench_train(const BenchOptions& o, const std::string& regime, int context = 1024, const std::string& preset = "",
                const std::vector<std::string>& window_sets = {}, const std::vector<std::string>& precisions = {});

// The paper's final Full-adaptive mix (50.3% T/8, 20.1% T/4, 9.4% T/2, 20.1% T) on H heads: on 8 heads
// {T/8, T/8, T/8, T/8, T/4, T/4, T/2, T}; on other H, head h takes the entry at the middle of its eighth-share.
std::vector<int> paper_adaptive_mix(int T, int H);

// What the benches time training steps on: one model of cfg's shape with random weights (the cost does not depend
// on them), its optimizer and a batch of random tokens. step() is one training step under the windows in force
// (zero grads, forward, backward, clipped AdamW update); forward() an evaluation batch.
struct BenchTrainer {
  explicit BenchTrainer(const Config& cfg);
  Config cfg;
  int B, T;
  Engine engine;  // weights from seed 0, no window policy (the bench sets the windows)
  Model<float>& model;
  AdamW opt;
  std::vector<int32_t> tokens;  // (B T + 1)
  void step();
  void forward();
};

// A row-major sgemm (M, N, K), `repeats` times per run, as a measurement case: the in-process reference the
// benches compare model FLOP rates with. The case owns its buffers.
struct SgemmBench {
  int M = 1024, N = 1024, K = 1024, repeats = 4;
  double flops() const { return 2.0 * M * N * K * repeats; }  // of one run
  MeasureCase make_case() const;
};
// oneDNN's bf16 product (M, N, K), operands already bf16, `repeats` times per run: the in-process reference rate of
// bf16 (train.precision=bf16), as SgemmBench is of fp32.
struct Bf16GemmBench {
  int M = 1024, N = 1024, K = 1024, repeats = 8;
  double flops() const { return 2.0 * M * N * K * repeats; }  // of one run
  MeasureCase make_case() const;
};
}  // namespace aah
