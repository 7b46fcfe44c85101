// aah bench <what>: benchmarks that print figures and ratios measured side by side in one process.
#include "bench/bench_decode.h"
#include "bench/bench_train.h"
#include "cli/commands.h"

#if __has_include("bench/bench_attention.h")
#include "bench/bench_attention.h"
#define AAH_HAVE_BENCH_ATTENTION 1
#endif

#if __has_include("bench/bench_tokenizer.h")
#include "bench/bench_tokenizer.h"
#define AAH_HAVE_BENCH_TOKENIZER 1
#endif

namespace aah {

void add_bench_commands(CLI::App& app, int& rc) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (figures and ratios measured side by side in one process)");
  bench->require_subcommand(1);
  static bool json = false;
  static int steps = 5;
  static std::string regime = "full";
  static int context = 1024;
  auto* tr = bench->add_subcommand("train", "Training step of bench-c: tokens/s, GFLOP/s, share of sgemm");
  tr->add_flag("--json", json, "One JSON object per line");
  tr->add_option("--steps", steps, "Timed steps (median reported)")->capture_default_str();
  tr->add_option("--regime", regime, "Also time this AAH regime side by side with full windows")
      ->capture_default_str();
  tr->add_option("--context", context, "Sequence length (batch = 4096 / context, so 4096 tokens per step)")
      ->capture_default_str();
  tr->callback([&rc] { rc = bench_train(json, steps, regime, context); });
  auto* dc = bench->add_subcommand("decode", "KV cache sized per head: bytes, decode and prefill tokens/s vs full windows");
  dc->add_flag("--json", json, "One JSON object per line");
  dc->callback([&rc] { rc = bench_decode(json); });
#ifdef AAH_HAVE_BENCH_TOKENIZER
  auto* tk = bench->add_subcommand("tokenizer", "Byte-level BPE (vocab 8192): training time on 10 MB, encoding MB/s");
  tk->add_flag("--json", json, "One JSON object per line");
  tk->callback([&rc] { rc = bench_tokenizer(json); });
#endif
#ifdef AAH_HAVE_BENCH_ATTENTION
  auto* at = bench->add_subcommand("attention", "Windowed attention kernel vs full windows and the dense path");
  at->add_flag("--json", json, "One JSON object per line");
  at->callback([&rc] { rc = bench_attention(json); });
#endif
}

}  // namespace aah
